sqlite3 ~/.config/google-chrome/Default/'Login Data' 'select origin_url, username_value, password_value from logins'
