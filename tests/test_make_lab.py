"""``make lab``: JupyterLab on notebooks/, with ``--allow-root`` only when run as root."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _lab_command(tmp_path: Path, uid: int) -> str:
    """The JupyterLab line ``make -n lab`` prints with ``id -u`` answering ``uid``."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (fake / "id").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["make", "-n", "lab"], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return next(line for line in done.stdout.splitlines() if "jupyter lab" in line)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize(("uid", "allow"), [(0, True), (1000, False)])
def test_make_lab_allows_root_only_as_root(tmp_path: Path, uid: int, allow: bool) -> None:
    line = _lab_command(tmp_path, uid)
    assert line.split()[-2 if allow else -1] == "notebooks/"
    assert ("--allow-root" in line) is allow
