"""The call profile samples both servers and splits their CPU into the parts it names.

The figures are measurements, never test conditions: a run is checked for its form, for
parts that add up to each call's CPU, and for samples in the parts a fusion predict
cannot run without (a sampler that took none would print zeros)."""

from __future__ import annotations

import math
import re
import sys

import pytest
from _run import BENCH_DIR, run_bench

sys.path.insert(0, str(BENCH_DIR))
from profile_calls import OPS, PARTS, SIDES, part_of


def stack(*frames: str) -> str:
    return ";".join(["<module> (bench/_sampled.py:7)", "run (uvicorn/server.py:86)", *frames])


@pytest.mark.parametrize(
    ("frames", "part"),
    [
        # compiled code is charged to the next Python call: numba's own frames pass to
        # the caller that named the kernel
        (
            [
                "_read (app/http/routers/trials.py:90)",
                "_numba_unpickle (numba/core/serialize.py:30)",
            ],
            "read",
        ),
        (["predict_one (app/http/routers/trials.py:122)"], "call"),
        (
            ["encode_each (app/service/live_model.py:411)", "rows (models/core/instance.py:457)"],
            "encode",
        ),
        (
            [
                "predict (app/service/trial_calls.py:238)",
                "put_many (app/service/live_model.py:139)",
            ],
            "keep",
        ),
        (
            [
                "predict_many (app/service/live_model.py:440)",
                "cumsum (numpy/_core/fromnumeric.py:2914)",
            ],
            "model",
        ),
        (["_run (storage/repository.py:464)", "script (storage/resp.py:258)"], "redis"),
        (
            ["predict (app/service/trial_calls.py:199)", "encode_instance (storage/codec.py:59)"],
            "stored",
        ),
        (["__call__ (app/service/gather.py:56)"], "gather"),
        (["run_asgi (uvicorn/protocols/http/httptools_impl.py:422)"], "http"),
        (["__call__ (bench/_service_edge.py:110)", "_send (bench/_service_edge.py:125)"], "http"),
        (["_run_once (asyncio/base_events.py:1906)"], "loop"),
    ],
)
def test_a_sample_goes_to_the_innermost_frame_a_part_names(frames: list[str], part: str) -> None:
    assert part_of(stack(*frames)) == part


def test_a_run_splits_each_call_into_parts_that_add_up() -> None:
    out = run_bench("profile_calls.py", "--quick", timeout=900)
    lines = out.strip().splitlines()
    figures = {}
    for line in lines:
        got = re.fullmatch(r"(\w+): (\d+\.\d\d|nan)", line)
        assert got, line
        figures[got[1]] = float(got[2])
    expected = [
        f"{op}_{side}_{what}"
        for op in OPS
        for side in SIDES
        for what in ("us_per_call", *(f"{part}_us" for part in PARTS))
    ] + [f"{op}_cpu_vs_edge" for op in ("label", "learn", "predict")]
    assert list(figures) == expected
    assert lines[-1].startswith("predict_cpu_vs_edge: ")
    for op in OPS:
        for side in SIDES:
            total = figures[f"{op}_{side}_us_per_call"]
            assert math.isfinite(total) and total > 0, (op, side, total)
            parts = sum(figures[f"{op}_{side}_{part}_us"] for part in PARTS)
            assert parts == pytest.approx(total, abs=0.01 * len(PARTS)), (op, side)
    # a fusion predict reads its body, encodes the votes, predicts and calls Redis
    for part in ("read", "encode", "model", "redis"):
        assert figures[f"predict_service_{part}_us"] > 0, part
    # the edge does none of the service's own work
    for part in ("read", "encode", "model", "keep", "redis", "gather"):
        assert figures[f"predict_edge_{part}_us"] == 0, part
