"""Each benchmark's table on ``docs/benchmarks.rst`` and its plot: what a run prints becomes
rows, a documented run rewrites only its own region, and ``--plot`` draws a PNG where it is
told, from a short run that leaves the page alone."""

from __future__ import annotations

import sys
from pathlib import Path

from _run import BENCH_DIR, run_bench

sys.path.insert(0, str(BENCH_DIR))

import _results

PRINTED = """\
majority problem, 300 trials
  31 basic algorithms              0.71      7,072
predict_vs_edge_6x10: 0.61 (target >= 0.6: met) [rounds spread 12%]
append_vs_edge_predict_6x10: 1.02
batch_learn_trials_per_s: 59,700 (target >= 50,000: met)
stats_p99_ms: 7.5 (target <= 5: MISSED)
healthz_round_trip_ms: 0.41 (the peer: same process, after ready)
predict_vs_edge: 0.55 (target >= 0.6: MISSED)
"""


def test_printed_figures_become_rows_with_their_targets() -> None:
    got = _results.figures(PRINTED)
    assert [f.name for f in got] == [
        "predict_vs_edge_6x10",
        "append_vs_edge_predict_6x10",
        "batch_learn_trials_per_s",
        "stats_p99_ms",
        "healthz_round_trip_ms",
        "predict_vs_edge",
    ]
    by = {f.name: f for f in got}
    assert by["batch_learn_trials_per_s"].value == 59_700
    assert by["batch_learn_trials_per_s"].target == ">= 50,000"
    assert by["stats_p99_ms"].met is False and by["predict_vs_edge_6x10"].met is True
    assert by["healthz_round_trip_ms"].target == "information"
    rows = _results.chosen(got, ["append_*"], {"healthz_round_trip_ms": ("<=", 1.0)})
    assert [f.name for f in rows] == [
        "predict_vs_edge_6x10",
        "append_vs_edge_predict_6x10",
        "batch_learn_trials_per_s",
        "stats_p99_ms",
        "healthz_round_trip_ms",
        "predict_vs_edge",  # the headline
    ]
    assert rows[4].met is True


def test_a_run_rewrites_its_own_region_only(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.rst"
    rows = _results.chosen(_results.figures(PRINTED))
    first = _results.region("a", rows, "python bench/a.py", None)
    _results.rewrite("a", first, page)
    _results.rewrite("b", _results.region("b", rows[:1], "python bench/b.py", None), page)
    again = _results.region("a", rows[:2], "python bench/a.py --plot", "_static/bench/a.png")
    _results.rewrite("a", again, page)
    text = page.read_text()
    assert text.count(".. begin a results") == 1 and text.count(".. begin b results") == 1
    assert text.index(".. begin a results") < text.index(".. begin b results")
    assert "``python bench/a.py --plot``" in text and ".. image:: _static/bench/a.png" in text
    region_a = text.split(".. end a results")[0]
    assert "``stats_p99_ms``" not in region_a  # the new run's rows only


def test_plot_option_draws_a_png_and_a_short_run_leaves_the_page(tmp_path: Path) -> None:
    page = _results.PAGE.read_text()
    png = tmp_path / "vr.png"
    out = run_bench("vr_combine.py", "--trials", "300", "--repeats", "1", "--plot", str(png))
    assert out.strip().splitlines()[-1].startswith("vr_combine_run_seconds: ")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _results.PAGE.read_text() == page  # not the documented command: nothing written


def test_help_names_the_plot_option_after_the_benchmarks_own() -> None:
    out = run_bench("vr_combine.py", "--help")
    assert "--repeats" in out and out.index("--plot [PNG]") > out.index("--repeats")
    assert "docs/_static/bench/vr_combine.png" in out
