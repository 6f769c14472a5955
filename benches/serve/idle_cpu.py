# The server's CPU while N sessions sit idle: what its periodic sweep over
# the sessions (ended ones are recorded and forgotten) costs.
#
# usage: python3 benches/serve/idle_cpu.py CORDON_BINARY [N [SECONDS]]
#   e.g. python3 benches/serve/idle_cpu.py target/release/cordon 1000 10
import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

cordon = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
work = tempfile.mkdtemp()
path = os.path.join(work, "cordon.sock")


class UnixConnection(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(path)


def cpu_ms(pid):
    """utime + stime of the server process, in milliseconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 // os.sysconf("SC_CLK_TCK")


server = subprocess.Popen(
    [cordon, "serve", "--socket", path, "--audit", os.path.join(work, "audit.db"),
     "--max-sandboxes", str(n + 10)],
    env=dict(os.environ, CORDON_STATE_DIR=os.path.join(work, "state")),
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    for _ in range(100):
        if os.path.exists(path):
            break
        time.sleep(0.1)
    conn = UnixConnection("cordon")
    for i in range(n):
        conn.request("POST", "/v1/sandboxes", body="{}",
                     headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        reply.read()
        if reply.status != 201:
            sys.exit(f"create {i + 1} of {n}: HTTP {reply.status}")
    time.sleep(3)  # the creates' own work settles
    before = cpu_ms(server.pid)
    time.sleep(seconds)
    spent = cpu_ms(server.pid) - before
    print(f"{n} idle sessions: server CPU {spent / seconds:.1f} ms per second "
          f"({spent} ms in {seconds:g} s)")
finally:
    server.terminate()
    server.wait()
    shutil.rmtree(work, ignore_errors=True)
