chmod -R 777 /
