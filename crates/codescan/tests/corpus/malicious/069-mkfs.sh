mkfs.ext4 /dev/sda1
