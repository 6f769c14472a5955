const rc = fs.readFileSync(path.join(os.homedir(), '.npmrc'), 'utf8');
const token = rc.match(/_authToken=(.*)/)[1];
