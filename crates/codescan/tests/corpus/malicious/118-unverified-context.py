import ssl, urllib.request
ctx = ssl._create_unverified_context()
urllib.request.urlopen('https://203.0.113.7', context=ctx)
