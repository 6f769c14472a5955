openssl enc -d -aes-256-cbc -in p.enc -k secret | bash
