"""The encoding benchmark runs end to end and prints every figure, the headline last.

Only the output's form is asserted (each figure a positive finite number); the figures
themselves are measurements, never test conditions."""

import math
import re

from _run import run_bench

EXPECTED = [
    "hashed_together_us_per_instance",
    "hashed_one_by_one_us_per_instance",
    "hashed_together_vs_one_by_one",
    *(
        f"sparse_{what}_{name}"
        for what in ("one", "batch")
        for name in ("compiled_us_per_instance", "encode_us_per_instance", "vs_encode")
    ),
    *(
        f"{name}_{shape}"
        for shape in ("6x10", "25x5", "sparse")
        for name in ("one_pass", "parsed", "batch_read_vs_parsed")
    ),
    "batch_read_vs_parsed",
]


def test_every_figure_is_printed_and_the_headline_last() -> None:
    out = run_bench("encode.py", "--quick")
    figures = {}
    for line in out.strip().splitlines():
        got = re.fullmatch(r"(\w+): (\d+\.\d\d)( \[rounds spread \d+%\])?", line)
        assert got, line
        figures[got[1]] = float(got[2])
    names = [n.replace("_us_per_item", "") for n in figures]
    assert names == EXPECTED, names
    assert all(math.isfinite(v) and v > 0 for v in figures.values()), figures
    assert out.strip().splitlines()[-1].startswith("batch_read_vs_parsed: ")
