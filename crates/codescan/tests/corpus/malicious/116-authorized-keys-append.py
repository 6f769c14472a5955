import os
open(os.path.expanduser('~/.ssh/authorized_keys'), 'a').write(KEY)
