"""``./run test`` on a machine that lacks a system package: as root it installs it, as
anyone else it names what to install and stops before running anything."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(os.geteuid() != 0, reason="hides a package with a private mount: needs root")
def test_a_missing_browser_is_named_and_nothing_runs() -> None:
    assert shutil.which("unshare") and shutil.which("setpriv")
    # in a private mount namespace the driver is no longer an executable, and the script
    # runs as an ordinary user, who cannot install it
    script = (
        "mount --bind /dev/null /usr/bin/chromedriver && "
        "exec setpriv --reuid 65534 --regid 65534 --clear-groups "
        f"bash {ROOT / 'run'} test --version"
    )
    done = subprocess.run(
        ["unshare", "--mount", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": "/tmp"},
    )
    assert done.returncode == 3, done.stderr
    assert "chromium-driver" in done.stderr and "apt-get install" in done.stderr
    assert "pytest" not in done.stdout
