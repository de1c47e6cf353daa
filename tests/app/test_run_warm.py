"""``./run`` warms the kernel cache once after setting up, so that ``./run start`` is quick:
run on a copy of the script whose ``.venv`` holds stand-ins that record their calls."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STUB = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$(dirname "$0")/../calls"
"""


def _checkout(tmp: Path) -> Path:
    """A directory with ./run, the files it looks at, and a venv installed long ago."""
    shutil.copy(ROOT / "run", tmp / "run")
    for name in ("pyproject.toml", "client/pyproject.toml", "models/a.py", "app/core/b.py"):
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text("")
    for name in ("python", "committee"):
        path = tmp / ".venv" / "bin" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(STUB)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    (tmp / ".venv" / ".installed").write_text("")
    long_ago = time.time() - 3600
    for name in ("pyproject.toml", "client/pyproject.toml", "models/a.py", "app/core/b.py"):
        os.utime(tmp / name, (long_ago, long_ago))
    return tmp


def _start(tmp: Path) -> list[str]:
    """The calls ``./run start`` made of the venv's commands."""
    calls = tmp / ".venv" / "calls"
    calls.unlink(missing_ok=True)
    env = {**os.environ, "COMMITTEE_REDIS_URL": "redis://unused"}  # no private Redis needed
    done = subprocess.run(
        ["bash", str(tmp / "run"), "start", "--port", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return calls.read_text().splitlines()


def test_the_kernels_are_warmed_once_then_again_when_their_sources_change(
    tmp_path: Path,
) -> None:
    tmp = _checkout(tmp_path)
    assert _start(tmp) == ["committee warm", "committee serve --port 1"]
    assert _start(tmp) == ["committee serve --port 1"]
    os.utime(tmp / "models" / "a.py")  # changed since the warm-up
    assert _start(tmp) == ["committee warm", "committee serve --port 1"]
    assert _start(tmp) == ["committee serve --port 1"]
