cp /tmp/payload .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout
