exec(bytes.fromhex('7072696e7428226869222920').decode())
