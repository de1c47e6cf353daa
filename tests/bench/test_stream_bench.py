"""The stream benchmark runs end to end: the service's stream and the WebSocket echo peer
on every vote form in the same run, and the same trials in REST batches, every figure
printed, the headline ratio last. Only the format is asserted, never the figures."""

import math
import re

from _run import run_bench

FORMS = ("bare_labels", "score_lists", "score_mappings")
EXPECTED = [
    *(
        name
        for form in FORMS
        for name in (
            f"stream_trials_per_second_{form}",
            f"ws_echo_messages_per_second_{form}",
            f"stream_vs_ws_echo_{form}",
        )
    ),
    *(f"batch_trials_per_second_{form}" for form in FORMS),
    "vote_forms_vs_bare_labels_stream",
    "vote_forms_vs_bare_labels_batch",
    "vote_forms_vs_bare_labels",
    "stats_requests",
    "stats_p50_ms",
    "stats_p99_ms",
    "stream_trials_per_second",
    "stream_vs_ws_echo",
]
LINE = re.compile(
    r"([a-z_0-9]+): (\S+)( \[rounds spread \d+%\])?( \(target [<>]= [\d.]+: (met|MISSED)\))?"
)


def test_the_stream_and_its_echo_peer_are_measured_on_every_vote_form() -> None:
    lines = run_bench("stream.py", "--quick").splitlines()
    assert lines[0].startswith("stream_trials: ")
    got = [LINE.fullmatch(ln) for ln in lines[1:]]
    assert all(got), lines
    assert [m[1] for m in got if m] == EXPECTED
    for m in got:
        assert m is not None
        assert math.isfinite(float(m[2])) and float(m[2]) > 0, m[0]
        assert (m[4] is not None) == (
            m[1].startswith(("stream_vs", "vote_forms_vs"))
            or m[1] in ("stats_p99_ms", "stream_trials_per_second")
        ), m[0]
