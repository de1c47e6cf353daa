"""The VR-Combine benchmark runs end to end and prints its headline figure last."""

import re

from _run import run_bench


def test_short_run_prints_the_run_time_last():
    out = run_bench("vr_combine.py", "--trials", "300", "--repeats", "1")
    assert re.fullmatch(r"vr_combine_run_seconds: \d+\.\d\d", out.strip().splitlines()[-1]), out
    assert "31 recycled (R-B)" in out and "vr-combine (62 learners)" in out
