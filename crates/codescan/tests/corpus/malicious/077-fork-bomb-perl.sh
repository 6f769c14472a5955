perl -e "fork while fork"
