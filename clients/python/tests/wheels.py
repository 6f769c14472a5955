"""A minimal pure-Python wheel built in memory (PEP 427), for installing a
package inside a sandbox without reaching any index."""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from typing import Dict


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def build_wheel(name: str, version: str, modules: Dict[str, str]) -> "tuple[str, bytes]":
    """The wheel's file name and bytes; ``modules`` maps ``pkg/mod.py`` to source."""
    dist_info = f"{name}-{version}.dist-info"
    files: Dict[str, bytes] = {path: src.encode() for path, src in modules.items()}
    files[f"{dist_info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: cordon-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = "".join(f"{p},{_record_hash(d)},{len(d)}\n" for p, d in files.items())
    record += f"{dist_info}/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr(f"{dist_info}/RECORD", record)
    return f"{name}-{version}-py3-none-any.whl", buf.getvalue()
