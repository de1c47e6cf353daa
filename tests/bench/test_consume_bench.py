"""The stream consumers' benchmark runs end to end: each source and ``learn/batch`` over
HTTP in the same run, every figure printed (the CPU per trial of the process applying
the trials and of Redis, on each side, too), the headline ratio last. Only the format is
asserted, never the figures."""

import math
import re

from _run import run_bench

EXPECTED = [
    "consume_trials_per_second_redis",
    "consume_trials_per_second_nats",
    "batch_http_trials_per_second",
    "applier_cpu_us_per_trial_redis",
    "redis_cpu_us_per_trial_redis",
    "applier_cpu_us_per_trial_nats",
    "redis_cpu_us_per_trial_nats",
    "applier_cpu_us_per_trial_batch_http",
    "redis_cpu_us_per_trial_batch_http",
    "redis_bound_vs_batch_http_redis",
    "consume_vs_batch_http_redis",
    "consume_vs_batch_http_nats",
    "consume_vs_batch_http",
]
LINE = re.compile(
    r"([a-z_0-9]+): (\S+)( \[rounds spread \d+%\])?( \(target [<>]= [\d.]+: (met|MISSED)\))?"
)


def test_each_source_is_measured_against_learn_batch_over_http() -> None:
    lines = run_bench("consume.py", "--quick").splitlines()
    assert lines[0].startswith("consume_trials: ")
    got = [LINE.fullmatch(ln) for ln in lines[1:]]
    assert all(got), lines
    assert [m[1] for m in got if m] == EXPECTED
    for m in got:
        assert m is not None
        assert math.isfinite(float(m[2])) and float(m[2]) > 0, m[0]
        assert (m[4] is not None) == m[1].startswith("consume_vs_batch_http"), m[0]
