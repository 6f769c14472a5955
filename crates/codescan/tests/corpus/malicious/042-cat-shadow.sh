cat /etc/shadow > /tmp/s
