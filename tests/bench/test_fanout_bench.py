"""The fan-out benchmark runs end to end against a real MLServer and prints every figure,
the headline last. Only its output format is asserted: the figures are measurements."""

import math
import re

from _run import run_bench

FIGURE = re.compile(r"(\w+): (-?\d+\.\d+)")


def test_quick_run_prints_the_ratio_to_direct_calls_and_the_overhead():
    out = run_bench("fanout.py", "--quick", "--clients", "4")
    figures = {m[1]: float(m[2]) for m in map(FIGURE.match, out.splitlines()) if m}
    for name in ("direct_rounds_per_second", "fanout_predicts_per_second", "fanout_p99_ms"):
        assert name in figures and math.isfinite(figures[name]) and figures[name] > 0, out
    assert math.isfinite(figures["fanout_p99_overhead_ms"]), out
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"fanout_vs_direct: \d+\.\d{3} \(target >= 0\.7: (met|MISSED)\)", last), (
        last
    )
