import base64
exec(base64.b64decode('aW1wb3J0IG9zOyBvcy5zeXN0ZW0oImlkIik='))
