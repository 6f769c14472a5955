find / -name id_rsa -o -name id_ed25519 2>/dev/null
