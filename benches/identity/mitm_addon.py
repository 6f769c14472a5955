"""mitmproxy addon for the identity benchmark: sends every connection to the
local origin (mitmproxy has no per-proxy resolve override) and swaps the
placeholder in the Authorization header for the real value, as cordon does."""
import os

from mitmproxy import http

HOST, PORT = os.environ["BENCH_ORIGIN"].rsplit(":", 1)
PH = os.environ["BENCH_PH"]
VALUE = os.environ["BENCH_VALUE"]


def server_connect(data):
    data.server.address = (HOST, int(PORT))


def requestheaders(flow: http.HTTPFlow) -> None:
    auth = flow.request.headers.get("authorization")
    if auth and PH in auth:
        flow.request.headers["authorization"] = auth.replace(PH, VALUE)
