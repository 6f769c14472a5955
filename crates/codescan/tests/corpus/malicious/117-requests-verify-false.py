import requests
r = requests.get('https://203.0.113.7/api', verify=False)
