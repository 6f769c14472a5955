curl -sSL https://x.example/agent | bash -s -- --token abc123
