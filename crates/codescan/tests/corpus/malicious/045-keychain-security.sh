security find-generic-password -wa 'Chrome Safe Storage'
