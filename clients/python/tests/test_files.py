"""The files API through the client, against the real `cordon serve`:
round trips, listings, tar, deletes, the size limits, and hostile paths
(see conftest.py)."""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from cordon_client import (
    BadRequest,
    Client,
    Conflict,
    CordonError,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    Sandbox,
)

from conftest import Server, running_server

WORK = "/workspace"  # the sandbox's scratch space and working directory


def test_files_roundtrip_list_tar_remove(sandbox: Sandbox) -> None:
    blob = bytes(range(256)) * 4
    sandbox.files.write(f"{WORK}/bin.dat", blob)
    sandbox.files.write(f"{WORK}/d/sub/t.txt", "text ✓")  # parents are made
    assert sandbox.files.read(f"{WORK}/bin.dat") == blob
    assert sandbox.files.read_text(f"{WORK}/d/sub/t.txt") == "text ✓"
    # the sandbox sees what the API wrote, and the API what the sandbox wrote
    assert sandbox.exec(["wc", "-c", f"{WORK}/bin.dat"]).stdout.split()[0] == str(len(blob))
    assert sandbox.exec(["sh", "-c", f"echo from-exec > {WORK}/d/e.txt"]).ok
    assert sandbox.files.read(f"{WORK}/d/e.txt") == b"from-exec\n"

    names = {e.name: e for e in sandbox.files.list(WORK)}
    assert names["bin.dat"].type == "file" and names["bin.dat"].size == len(blob)
    assert names["d"].type == "dir"
    assert {"tmp", "workspace"} <= {e.name for e in sandbox.files.list("/")}

    with tarfile.open(fileobj=io.BytesIO(sandbox.files.tar(f"{WORK}/d"))) as tar:
        members = {m.name.lstrip("./"): m for m in tar.getmembers()}
        assert members["sub/t.txt"].isfile()
        extracted = tar.extractfile(members["sub/t.txt"])
        assert extracted is not None and extracted.read() == "text ✓".encode()

    with pytest.raises(Conflict):
        sandbox.files.write(f"{WORK}/d", b"a directory is not a file")
    with pytest.raises(Conflict):
        sandbox.files.remove(f"{WORK}/d")  # not empty
    sandbox.files.remove(f"{WORK}/d", recursive=True)
    sandbox.files.remove(f"{WORK}/bin.dat")
    for gone in (f"{WORK}/bin.dat", f"{WORK}/d/e.txt"):
        with pytest.raises(NotFound):
            sandbox.files.read(gone)


@pytest.fixture()
def host_dir() -> Iterator[Path]:
    """A host directory the sandbox's ids could write if a path led there."""
    with tempfile.TemporaryDirectory(prefix="cordon-pyclient-host-", dir="/var/tmp") as tmp:
        os.chmod(tmp, 0o777)
        secret = Path(tmp) / "secret"
        secret.write_text("host secret\n")
        os.chmod(secret, 0o666)
        yield Path(tmp)


def test_hostile_paths_are_refused(sandbox: Sandbox) -> None:
    # Layer: the files API's path checks (crates/session/src/files/path.rs):
    # `..` and NUL are 400, kernel filesystems 403.
    with pytest.raises(BadRequest):
        sandbox.files.read(f"{WORK}/../etc/passwd")
    with pytest.raises(BadRequest):
        sandbox.files.write(f"{WORK}/../../escape", b"x")
    with pytest.raises(BadRequest):
        sandbox.files.read(f"{WORK}/a\0b")
    with pytest.raises(Forbidden):
        sandbox.files.read("/proc/cpuinfo")


def test_a_planted_symlink_never_leads_to_the_host(sandbox: Sandbox, host_dir: Path) -> None:
    # Layer: files resolved inside the sandbox's root (openat2
    # RESOLVE_IN_ROOT from its root, crates/session/src/files): the links
    # point at a host path that exists on the host and not in the sandbox.
    secret = host_dir / "secret"
    planted = sandbox.exec(["sh", "-c", f"ln -s {secret} {WORK}/flink && ln -s {host_dir} {WORK}/dlink"])
    assert planted.ok, planted.stderr
    with pytest.raises(NotFound):
        sandbox.files.read(f"{WORK}/flink")
    with pytest.raises(NotFound):
        sandbox.files.list(f"{WORK}/dlink")

    # writing through the planted links: the link is replaced, or the
    # write fails; the host is untouched either way
    sandbox.files.write(f"{WORK}/flink", b"written through the link?\n")
    try:
        sandbox.files.write(f"{WORK}/dlink/new", b"into the host dir?\n")
    except CordonError:
        pass  # refused is fine; reaching the host is not
    assert secret.read_text() == "host secret\n"
    assert sorted(p.name for p in host_dir.iterdir()) == ["secret"]
    # the sandbox sees the replacement as a file of its own
    assert sandbox.exec(["cat", f"{WORK}/flink"]).stdout == "written through the link?\n"


@pytest.fixture(scope="module")
def small_limits() -> Iterator[Server]:
    with running_server("--max-file-size", "1K", "--files-quota", "4K") as srv:
        yield srv


def test_file_size_limit_and_quota(small_limits: Server) -> None:
    with Client(socket=small_limits.socket) as c, Sandbox.create(preset="low", client=c) as sb:
        # Refused before the body is read, again and again on one kept-alive
        # connection: each answer must reach the client (the server reads
        # the refused body first; a connection closed with bytes unread is
        # reset, and the reset loses the answer).
        for _ in range(20):
            with pytest.raises(PayloadTooLarge) as big:
                sb.files.write(f"{WORK}/big", b"x" * 2048)
            assert big.value.status == 413
        with pytest.raises(NotFound):
            sb.files.read(f"{WORK}/big")  # nothing of it was written
        for i in range(4):
            sb.files.write(f"{WORK}/f{i}", b"y" * 1000)
        with pytest.raises(QuotaExceeded) as quota:
            sb.files.write(f"{WORK}/f4", b"y" * 1000)
        assert quota.value.status == 507 and quota.value.message
