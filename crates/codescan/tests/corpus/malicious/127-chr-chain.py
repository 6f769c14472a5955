cmd = chr(105)+chr(100)+chr(32)+chr(59)+chr(32)+chr(108)+chr(115)
__import__('os').system(cmd)
