const vm = require('vm');
vm.runInThisContext(Buffer.from(p, 'base64').toString('utf8'));
