"""Gateway overhead per tools/call over stdio: the same MCP server called
directly and through `cordon mcp wrap`, in the same run, alternating
rounds so that drift hits both alike.

Usage: wrap_overhead.py CORDON N -- SERVER_CMD...
Prints the median and p90 latency of a tools/call (echo) directly, through
the gateway without an audit store ("wrapped") and with one ("audited"),
and the differences of the medians.
"""

import json
import statistics
import subprocess
import sys
import tempfile
import time


class Client:
    def __init__(self, argv):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.next = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools = self.request("tools/list", {})["result"]["tools"]
        self.tool = next(t["name"] for t in tools if t["name"] == "echo")
        # MCP servers name echo's argument differently.
        props = next(t for t in tools if t["name"] == "echo")["inputSchema"].get("properties", {})
        self.arg = "message" if "message" in props else "text"

    def send(self, msg):
        self.p.stdin.write((json.dumps(msg) + "\n").encode())
        self.p.stdin.flush()

    def request(self, method, params):
        self.next += 1
        self.send({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params})
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise SystemExit(f"the server closed its stdout during {method}")
            m = json.loads(line)
            if m.get("id") == self.next and "method" not in m:
                return m

    def call(self):
        t = time.perf_counter()
        r = self.request("tools/call", {"name": self.tool, "arguments": {self.arg: "ping"}})
        dt = time.perf_counter() - t
        assert "result" in r, r
        return dt

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


def main():
    cordon, n = sys.argv[1], int(sys.argv[2])
    server = sys.argv[sys.argv.index("--") + 1:]
    extra = sys.argv[3:sys.argv.index("--")]
    direct = Client(server)
    state = tempfile.mkdtemp(prefix="cordon-mcp-bench-")
    pins = ["--pins", f"{state}/pins.json"]
    wrapped = Client([cordon, "mcp", "wrap", "--no-audit", "-q", *pins, *extra, "--allow-tool", "echo", "--", *server])
    audited = Client([cordon, "mcp", "wrap", "--audit", f"{state}/audit.db", "-q", *pins, *extra, "--allow-tool", "echo", "--", *server])
    clients = (("direct", direct), ("wrapped", wrapped), ("audited", audited))
    for _, c in clients:
        for _ in range(50):
            c.call()
    times = {name: [] for name, _ in clients}
    rounds = 10
    for _ in range(rounds):
        for name, c in clients:
            times[name].extend(c.call() for _ in range(n // rounds))
    for _, c in clients:
        c.close()
    ms = lambda xs, q: 1000 * statistics.quantiles(xs, n=100)[q - 1]
    med = {k: 1000 * statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"{k:8} calls={len(v)} median={med[k]:.3f} ms p90={ms(v, 90):.3f} ms")
    print(f"overhead median={med['wrapped'] - med['direct']:.3f} ms (audited: {med['audited'] - med['direct']:.3f} ms)")


main()
