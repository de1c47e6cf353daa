"""The learners' benchmark runs end to end and prints its headline figures last.

Only its output format and sanity checks are asserted (each ratio a finite positive
number); the figures themselves are measurements, never test conditions.
"""

import math
import re

from _run import run_bench

RATIOS = [
    "per_trial_cost_1m_vs_10k",
    "balanced_winnow_batch_vs_river_perceptron_learn_many",
    "balanced_winnow_vs_river_perceptron",
    "committee_vs_river_ovr_perceptron",
]


def test_quick_run_prints_the_ratios_last():
    out = run_bench("learners.py", "--quick")
    last = out.strip().splitlines()[-len(RATIOS) :]
    for name, line in zip(RATIOS, last, strict=True):
        m = re.fullmatch(rf"{name}: (\S+) \(target [<>]= [\d.]+\)", line)
        assert m, out
        assert math.isfinite(float(m[1])) and float(m[1]) > 0, line
    # the batch call is compared with River's batch call only, never its per-trial loop
    assert "balanced_winnow_batch_vs_river_perceptron:" not in out
    for row in ("balanced_winnow_batch", "river_perceptron", "river_perceptron_learn_many"):
        assert re.search(rf"^  {row} +\d+ ", out, re.M), f"{row} missing from:\n{out}"
