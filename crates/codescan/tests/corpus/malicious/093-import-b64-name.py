import base64
__import__(base64.b64decode('b3M=').decode()).system('id')
