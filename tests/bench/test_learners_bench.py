"""The learners' benchmark runs end to end and prints its headline figures last.

Only its output format and sanity checks are asserted; the figures themselves are
measurements, never test conditions.
"""

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "learners.py"


def test_quick_run_prints_the_headline_ratios_last():
    out = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    last = out.strip().splitlines()[-2:]
    assert re.match(r"balanced_winnow_vs_river_perceptron: \d+\.\d\d", last[0]), out
    assert re.match(r"committee_vs_river_ovr_perceptron: \d+\.\d\d", last[1]), out
    assert "river_perceptron" in out and "balanced_winnow_batch" in out
