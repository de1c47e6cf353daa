"""The durability benchmark runs end to end and prints each mode's figure and its ratio
against ``applied``; only the format is asserted, never the figures."""

import math
import re

from _run import run_bench

EXPECTED = [
    "learns_per_s_applied_one_node",
    "learns_per_s_fsync_one_node",
    "learns_per_s_applied_cluster",
    "learns_per_s_replicated_cluster",
    "fsync_vs_applied",
    "replicated_vs_applied",
]


def test_every_mode_is_measured_against_applied() -> None:
    out = run_bench("ack.py", "--seconds", "0.3")
    lines = [ln for ln in out.splitlines() if ln.strip()]
    got = [re.fullmatch(r"([a-z_]+): (\S+)", ln) for ln in lines]
    assert all(got), lines
    assert [m[1] for m in got if m] == EXPECTED
    for m in got:
        assert m is not None
        value = float(m[2])
        assert math.isfinite(value) and value > 0, m[0]
