"""The cold-start benchmark runs end to end and prints every figure, the headline last.

Only its output format is asserted; the figures themselves are measurements, never test
conditions. ``--quick`` reuses the numba cache the rest of the suite fills.
"""

import math
import re

from _run import run_bench

from models.registry import KINDS

FIGURE = re.compile(r"(\w+): (\d+\.\d+)")


def test_quick_run_prints_ready_time_and_every_kinds_first_trial():
    out = run_bench("cold_start.py", "--quick")
    figures = {m[1]: float(m[2]) for m in map(FIGURE.match, out.splitlines()) if m}
    expected = ["listening_seconds", "ready_seconds", "healthz_round_trip_ms"]
    expected += [f"first_trial_{kind.replace('-', '_')}_seconds" for kind in KINDS]
    for name in expected:
        assert name in figures and math.isfinite(figures[name]) and figures[name] > 0, out
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(
        r"slowest_first_trial_seconds: \d+\.\d{3} \([\w-]+, \d+x healthz; "
        r"target <= 1 s: (met|MISSED)\)",
        last,
    ), last
