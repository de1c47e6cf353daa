"""The backtest benchmark runs end to end on a Redis of its own: every figure printed, the
headline last. Asserted: the format, and that both replays counted the same (the script
fails otherwise)."""

import re

from _run import run_bench

LINE = re.compile(r"([a-z_]+): ([0-9][0-9,.]*)(?: \((.+)\))?")


def test_the_quick_run_prints_each_streams_figures_and_the_headline_last() -> None:
    out = run_bench("backtest.py", "--quick").strip().splitlines()
    got = [LINE.fullmatch(line) for line in out]
    assert all(got), out
    names = [m.group(1) for m in got if m]
    assert names == [
        f"{stream}_{figure}"
        for stream in ("fusion", "sparse")
        for figure in (
            "python_replay_trials_per_second",
            "backtest_trials_per_second",
            "backtest_vs_python_replay",
        )
    ] + ["backtest_vs_python_replay"]
    last = got[-1]
    assert last is not None and re.fullmatch(r"target >= 5: (met|MISSED)", last.group(3) or "")
    ratios = [float(m.group(2)) for m in got if m and m.group(1).endswith("_vs_python_replay")]
    assert ratios[-1] == min(ratios[:-1])
