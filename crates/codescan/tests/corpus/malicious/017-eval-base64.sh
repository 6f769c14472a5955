eval "$(echo ZWNobyBoaQ== | base64 -d)"
