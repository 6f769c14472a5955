sudo rm -rf /usr
