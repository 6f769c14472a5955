nohup ./cpuminer -a cryptonight -o stratum+tcp://xmr.pool.example:3333 -u wallet &
