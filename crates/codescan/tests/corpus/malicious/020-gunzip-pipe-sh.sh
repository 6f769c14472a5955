gunzip -c p.gz | sh
