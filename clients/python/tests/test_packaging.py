"""`pip install ./clients/python` works from a checkout the installing user
cannot write (a shared or read-only tree): building the client writes
nothing into its own source tree, and the wheel carries the whole package."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, Tuple

from conftest import REPO, skip_or_fail

CLIENT = REPO / "clients" / "python"
# What running these tests writes beside the sources, not the build.
TEST_LITTER = {"__pycache__", ".pytest_cache"}


def _tree(root: Path) -> Dict[str, Tuple[int, int]]:
    """Every path under root (test litter aside) with its size and mtime."""
    found: Dict[str, Tuple[int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in TEST_LITTER]
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            found[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return found


def test_building_the_client_writes_nothing_into_its_source_tree(tmp_path: Path) -> None:
    # The build backend comes from the venv (`.ci/pyclient.sh install`), so
    # this test needs no index: --no-build-isolation.
    probe = subprocess.run([sys.executable, "-c", "import hatchling"], capture_output=True)
    if probe.returncode != 0:
        skip_or_fail("the client's build backend (hatchling) is not installed: run 'bash .ci/pyclient.sh install'")
    before = _tree(CLIENT)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--no-build-isolation", "--wheel-dir", str(tmp_path), str(CLIENT)],
        capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stderr
    after = _tree(CLIENT)
    assert after == before, f"the build wrote into {CLIENT}: {sorted(set(after.items()) ^ set(before.items()))}"

    wheels = list(tmp_path.glob("cordon_client-*.whl"))
    assert len(wheels) == 1, wheels
    names = set(zipfile.ZipFile(wheels[0]).namelist())
    sources = {
        f"cordon_client/{p.name}" for p in (CLIENT / "src" / "cordon_client").iterdir() if p.is_file()
    }
    assert "cordon_client/py.typed" in sources
    assert sources <= names, f"missing from the wheel: {sorted(sources - names)}"
