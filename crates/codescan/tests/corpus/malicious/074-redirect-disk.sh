cat /dev/urandom > /dev/sda
