"""Fan-out: predicts whose votes the service fetches from three v2 endpoints, against
the same endpoints called directly by the load generator, in the same run.

A real MLServer (its own environment, see ``tests/harness/mlserver.py``) serves three
scikit-learn classifiers of the iris data. Two closed loops of ``--clients`` clients each
run for ``--seconds``:

* ``direct``: each request calls the three endpoints at once and waits for all three
  (what an application does when it collects the votes and posts them itself, without
  the post);
* ``fanout``: each request is ``POST /v1/models/{name}/predict`` with ``inputs``; the
  service (one worker, its own Redis) calls the three endpoints, fuses and keeps the
  trial.

Figures: ``fanout_vs_direct`` (fan-out predicts per second over direct rounds per second,
target >= 0.7), the p50 and p99 of each, and ``fanout_p99_overhead_ms`` (fan-out p99 less
direct p99: what the service adds over the slowest endpoint; information).

Run as ``python bench/fanout.py [--seconds S] [--clients N]`` (10 s after 1 s, 16
clients); ``--quick`` is a short run: 0.5 s after 0.25 s.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

import httpx
import numpy as np
from _results import recorded
from service import service_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from harness.mlserver import MLServer

from storage.server import EmbeddedRedis

TARGET = 0.7
LABELS = ["setosa", "versicolor", "virginica"]
EXPERTS = ("lr", "tree", "nb")


def classifiers() -> tuple[dict[str, object], np.ndarray]:
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import GaussianNB
    from sklearn.tree import DecisionTreeClassifier

    x, y = load_iris(return_X_y=True)
    models = {
        "lr": LogisticRegression(max_iter=500).fit(x, y),
        "tree": DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, y),
        "nb": GaussianNB().fit(x, y),
    }
    return models, x


async def closed_loop(
    call: Callable[[httpx.AsyncClient, int], Awaitable[None]],
    clients: int,
    seconds: float,
    warmup: float,
) -> tuple[float, float, float]:
    """``clients`` loops calling ``call`` for ``seconds`` after a warm-up of ``warmup``
    seconds: calls per second, p50 and p99 in ms."""
    latencies: list[float] = []
    start = time.perf_counter()
    warm, end = start + warmup, start + warmup + seconds
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=4 * clients)
    async with httpx.AsyncClient(timeout=30, limits=limits) as http:

        async def loop(k: int) -> None:
            i = k
            while (now := time.perf_counter()) < end:
                await call(http, i)
                done = time.perf_counter()
                if now >= warm and done <= end:
                    latencies.append(done - now)
                i += clients

        await asyncio.gather(*(loop(k) for k in range(clients)))
    ms = np.asarray(latencies) * 1000
    return len(latencies) / seconds, float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="0.5 s per loop, after 0.25 s")
    args = parser.parse_args(argv)
    seconds = 0.5 if args.quick else args.seconds
    warmup = 0.25 if args.quick else 1.0
    models, x = classifiers()
    rows = [row.tolist() for row in x]
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        ml = stack.enter_context(MLServer(tmp / "mlserver", models))
        redis = stack.enter_context(EmbeddedRedis(tmp / "redis"))
        env = {
            "COMMITTEE_REDIS_URL": redis.url,
            "COMMITTEE_ALLOWED_ENDPOINTS": "127.0.0.1:*",
            "COMMITTEE_LOG_LEVEL": "warning",
        }
        service = stack.enter_context(service_server("service", env, tmp))
        name = "fanout"
        endpoints = {
            e: {"url": ml.url, "protocol": "v2", "model": e, "output": "predict_proba",
                "classes": LABELS}
            for e in EXPERTS
        }  # fmt: skip
        experts = {"expert_names": list(EXPERTS), "deadline_ms": 1000, "endpoints": endpoints}
        spec = {"name": name, "labels": LABELS, "input": {"experts": experts},
                "learner": {"kind": "committee"}}  # fmt: skip
        httpx.post(f"{service.url}/v1/models", json=spec, timeout=30).raise_for_status()

        def infer(row: list[float], model: str) -> dict[str, object]:
            tensor = {"name": "input-0", "shape": [1, 4], "datatype": "FP64", "data": row}
            return {"inputs": [tensor], "outputs": [{"name": "predict_proba"}]}

        async def direct(http: httpx.AsyncClient, i: int) -> None:
            row = rows[i % len(rows)]
            answers = await asyncio.gather(
                *(http.post(f"{ml.url}/v2/models/{e}/infer", json=infer(row, e)) for e in EXPERTS)
            )
            for a in answers:
                a.raise_for_status()

        abstained = 0

        async def fanout(http: httpx.AsyncClient, i: int) -> None:
            nonlocal abstained
            body = {"inputs": rows[i % len(rows)], "track": False}
            r = await http.post(f"{service.url}/v1/models/{name}/predict", json=body)
            r.raise_for_status()
            abstained += len(r.json()["abstained"])

        d_rate, d_p50, d_p99 = asyncio.run(closed_loop(direct, args.clients, seconds, warmup))
        f_rate, f_p50, f_p99 = asyncio.run(closed_loop(fanout, args.clients, seconds, warmup))
    print(f"direct_rounds_per_second: {d_rate:.1f}")
    print(f"direct_p50_ms: {d_p50:.2f}")
    print(f"direct_p99_ms: {d_p99:.2f}")
    print(f"fanout_predicts_per_second: {f_rate:.1f}")
    print(f"fanout_p50_ms: {f_p50:.2f}")
    print(f"fanout_p99_ms: {f_p99:.2f}")
    print(f"fanout_abstentions: {abstained}")
    print(f"fanout_p99_overhead_ms: {f_p99 - d_p99:.2f}")
    ratio = f_rate / d_rate
    met = "met" if ratio >= TARGET else "MISSED"
    print(f"fanout_vs_direct: {ratio:.3f} (target >= {TARGET}: {met})")


if __name__ == "__main__":
    with recorded("fanout", information=["fanout_p99_overhead_ms"]):
        main()
