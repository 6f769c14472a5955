echo 'export PATH=/tmp/.bin:$PATH' | tee -a ~/.zshrc
