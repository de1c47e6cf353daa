"""A benchmark script run as its user runs it, for the tests of what it prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def run_bench(script: str, *args: str, timeout: float = 600) -> str:
    """What ``python bench/<script> <args>`` prints; it must exit with 0 (else its
    error output's end is the failure's message)."""
    done = subprocess.run(
        [sys.executable, str(BENCH_DIR / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
