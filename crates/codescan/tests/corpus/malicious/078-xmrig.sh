./xmrig -o pool.supportxmr.com:443 -u 44AFFq5kSiGBoZ -k --tls --donate-level 1
