"""A keep-alive HTTP client for `cordon serve`'s unix socket, shared by the
benchmark scripts in this directory (they put it on PYTHONPATH)."""
import http.client
import json
import socket
import sys


class Unix(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.path)


class Client:
    def __init__(self, path):
        self.conn = Unix(path)

    def call(self, method, url, body=None):
        """The status and body of one request."""
        self.conn.request(method, url,
                          body=None if body is None else json.dumps(body),
                          headers={"Content-Type": "application/json"})
        r = self.conn.getresponse()
        return r.status, r.read()

    def ok(self, method, url, body=None):
        """The body of a request that must succeed; exits otherwise."""
        status, data = self.call(method, url, body)
        if status >= 300:
            sys.exit(f"{method} {url}: {status} {data[:200]!r}")
        return data

    def wait_for_pool(self, timeout=60.0):
        """Until the warm pool holds its target (no build competes with
        what is measured next), at most `timeout` seconds."""
        import time
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            pool = json.loads(self.ok("GET", "/v1/health"))["pool"]
            if pool.get("ready", 0) >= pool.get("target", 0):
                return
            time.sleep(0.02)
