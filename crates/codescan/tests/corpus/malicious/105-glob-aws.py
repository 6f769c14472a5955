import glob, os
for f in glob.glob(os.path.expanduser('~/.aws/*')):
    print(open(f).read())
