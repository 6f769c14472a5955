import sqlite3, os
db = os.path.join(os.environ['HOME'], '.config/google-chrome/Default/Login Data')
rows = sqlite3.connect(db).execute('select * from logins').fetchall()
