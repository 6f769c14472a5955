> /var/log/auth.log
