from pathlib import Path
k = (Path.home() / '.ssh' / 'id_ed25519').read_text()
