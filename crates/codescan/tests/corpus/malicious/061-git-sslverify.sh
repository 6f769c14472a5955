git -c http.sslVerify=false clone https://203.0.113.7/r.git
