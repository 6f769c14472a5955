wget --no-check-certificate https://203.0.113.7/p
