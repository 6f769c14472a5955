import codecs
exec(codecs.decode('vzcbeg bf; bf.flfgrz("vq")', 'rot13'))
