curl -k https://203.0.113.7/p -o /tmp/p
