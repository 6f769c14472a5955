import os
path = os.path.join(os.path.expanduser('~'), '.netrc')
data = open(path).read()
