"""The ``committee`` command line, run as a real process."""

import json
import subprocess
import sys


def test_demo_streams_the_majority_problem_and_reports_errors():
    out = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "demo", "--trials", "600", "--test", "500"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    assert "cumulative mistakes" in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("600")]
    assert rows, out
    mistakes = [int(v) for v in rows[-1][1:]]
    assert all(0 < m < 600 for m in mistakes)
    errors = json.loads(out[out.index("{") :])
    assert set(errors) >= {"committee", "weighted-majority"}
    assert all(0.0 <= e <= 1.0 for e in errors.values())
