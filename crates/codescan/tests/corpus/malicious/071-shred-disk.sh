shred -n 3 -z /dev/nvme0n1
