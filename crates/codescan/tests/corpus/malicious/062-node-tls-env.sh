export NODE_TLS_REJECT_UNAUTHORIZED=0
node fetch.js
