fs.writeFileSync('.git/hooks/pre-commit', '#!/bin/sh\nnode .x.js\n', { mode: 0o755 });
