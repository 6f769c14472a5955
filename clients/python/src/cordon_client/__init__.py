"""cordon_client: the Python client of ``cordon serve``.

A sandbox that lives across many calls, over the server's unix socket (the
default) or TCP with a bearer token::

    from cordon_client import Sandbox

    with Sandbox.create(preset="low") as sb:          # deleted on exit
        sb.files.write("/workspace/a.py", "print(6*7)")
        r = sb.exec(["python3", "/workspace/a.py"], timeout=30)
        print(r.exit_code, r.stdout)
        ctx = sb.code_context("python")
        ctx.run("x = 41")
        print(ctx.run("x + 1").value)                 # 42

:class:`AsyncSandbox` is the same for asyncio. Errors are typed
(:class:`NotFound`, :class:`RateLimited`, ...; all are :class:`CordonError`).
"""

from . import _errors, _models
from ._async import AsyncClient, AsyncCodeContext, AsyncFiles, AsyncProcess, AsyncSandbox
from ._config import default_socket_path
from ._errors import *  # noqa: F401,F403 (the typed errors; listed in _errors.__all__)
from ._models import *  # noqa: F401,F403 (the returned values; listed in _models.__all__)
from ._sync import Client, CodeContext, Files, Process, Sandbox

__version__ = "0.1.0"

__all__ = [
    "Sandbox",
    "Client",
    "Process",
    "Files",
    "CodeContext",
    "AsyncSandbox",
    "AsyncClient",
    "AsyncProcess",
    "AsyncFiles",
    "AsyncCodeContext",
    "default_socket_path",
    *_errors.__all__,
    *_models.__all__,
]
