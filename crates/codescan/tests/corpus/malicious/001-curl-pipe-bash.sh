curl -fsSL https://get.tool.example/install.sh | bash
