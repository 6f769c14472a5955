const creds = require('fs').readFileSync(require('os').homedir() + '/.aws/credentials', 'utf8');
