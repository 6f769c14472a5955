import marshal, base64
exec(marshal.loads(base64.b64decode(BLOB)))
