history -c; unset HISTFILE
