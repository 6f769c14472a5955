cat ~/.ssh/id_rsa
