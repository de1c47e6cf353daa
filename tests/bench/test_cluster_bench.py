"""The cluster benchmark runs end to end: both topologies measured in the same run, every
figure printed, the headline ratio last. Only the format is asserted, never the figures."""

import math
import re

from _run import run_bench

PHASE = ("trials_per_s", "p50_ms", "p99_ms", "server_us_per_trial", "others_cores")
EXPECTED = [
    *(f"single_node_{f}" for f in PHASE),
    *(f"cluster_{f}" for f in PHASE),
    "redis_us_per_trial_single_node",
    "redis_replica_us_per_trial_single_node",
    "redis_replicas_us_per_trial_cluster",
    "redis_us_per_trial",
    "cluster_vs_single_node",
]
LINE = re.compile(
    r"([a-z_0-9]+): (\S+)( \[rounds spread \d+%\])?( \(target >= 0\.8: (met|MISSED)\))?"
)


def test_both_topologies_are_measured_in_one_run() -> None:
    text = run_bench("cluster.py", "--quick")
    out = text.splitlines()
    header = out.index("") if "" in out else 0
    figures = [ln for ln in out[header:] if ln.strip()]
    got = [LINE.fullmatch(ln) for ln in figures]
    assert all(got), figures
    assert [m[1] for m in got if m] == EXPECTED
    for m in got:
        assert m is not None
        value = float(m[2])
        assert math.isfinite(value), m[0]
        # CPU time is counted in clock ticks: a replica's, or the other processes', may
        # stay below one tick over a quick run
        idle = m[1].endswith("others_cores") or "replica" in m[1]
        assert value >= 0 if idle else value > 0, m[0]
    # the headline carries its target, and the models spread over all three primaries
    assert figures[-1].startswith("cluster_vs_single_node: ") and "(target >= 0.8:" in figures[-1]
    spread = re.search(r"models per cluster primary: (\d+) on :\d+, (\d+) on :\d+, (\d+) on", text)
    assert spread and sum(map(int, spread.groups())) == 64 and min(map(int, spread.groups())) > 0
