"""The VR-Combine benchmark runs end to end and prints its headline figure last."""

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "vr_combine.py"


def test_short_run_prints_the_run_time_last():
    out = subprocess.run(
        [sys.executable, str(BENCH), "--trials", "300", "--repeats", "1"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    assert re.fullmatch(r"vr_combine_run_seconds: \d+\.\d\d", out.strip().splitlines()[-1]), out
    assert "31 recycled (R-B)" in out and "vr-combine (62 learners)" in out
