s = ')"di"(metsys.so;so tropmi'
exec(s[::-1])
