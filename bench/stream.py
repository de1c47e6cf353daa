"""Live trials over one WebSocket, and dashboards' statistics under load.

Serves the real app with one uvicorn worker against a private Redis, like
``bench/service.py``, and measures:

* ``stream_trials_per_second``: learn trials of S4's majority problem (n = 20, r = 10,
  k = 5, noise 0.05) sent through one WebSocket to a Committee model, up to ``--window``
  requests in flight, answers counted as they come back (target >= 10,000);
* ``stats_p50_ms``/``stats_p99_ms``: ``GET /v1/models/{name}/stats`` polled back to back
  while the model takes 1,000 trials/s over another WebSocket (target p99 <= 5 ms).

The load runs in separate processes from the server. The headline figure is printed last.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import httpx
import numpy as np
import orjson
import websockets

from models.inputs.datasets import MajorityProblem

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service import uvicorn

from storage.server import EmbeddedRedis

PROBLEM = MajorityProblem(n=20, r=10, k=5, noise=0.05)
EXPERTS = [f"e{i}" for i in range(PROBLEM.n_experts)]
TARGETS = {"stream_trials_per_second": (">=", 10_000.0), "stats_p99_ms": ("<=", 5.0)}


def messages(n: int, seed: int) -> list[bytes]:
    """``learn`` requests: each expert votes for one label (its arg-max)."""
    xs, ys, _ = PROBLEM.sample(n, np.random.default_rng(seed))
    out = []
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        votes = {EXPERTS[int(e)]: int(c) for e, c in zip(x.expert, x.cls, strict=True)}
        msg = {"op": "learn", "id": i, "instance": {"experts": votes}, "label": int(y)}
        out.append(orjson.dumps(msg))
    return out


async def _pump(url: str, msgs: list[bytes], window: int, rate: float | None) -> float:
    """Send ``msgs`` with at most ``window`` unanswered (and at most ``rate`` per second);
    returns the seconds from the first send to the last answer."""
    slots = asyncio.Semaphore(window)
    async with websockets.connect(url, max_size=None) as ws:

        async def send() -> None:
            start = time.perf_counter()
            for i, m in enumerate(msgs):
                if rate is not None:
                    ahead = start + i / rate - time.perf_counter()
                    if ahead > 0:
                        await asyncio.sleep(ahead)
                await slots.acquire()
                await ws.send(m.decode())

        sender = asyncio.create_task(send())
        start = time.perf_counter()
        for _ in msgs:
            answer = orjson.loads(await ws.recv())
            if "error" in answer:
                raise RuntimeError(f"stream error: {answer}")
            slots.release()
        await sender
        return time.perf_counter() - start


def pump(url: str, msgs: list[bytes], window: int, rate: float | None = None) -> float:
    return asyncio.run(_pump(url, msgs, window, rate))


def poll_stats(url: str, seconds: float) -> list[float]:
    """Latencies (ms) of back-to-back stats requests for ``seconds``."""
    out = []
    with httpx.Client(base_url=url, timeout=10) as http:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t = time.perf_counter()
            r = http.get("/v1/models/live/stats")
            out.append((time.perf_counter() - t) * 1e3)
            r.raise_for_status()
    return out


def line(name: str, value: float) -> str:
    target = TARGETS.get(name)
    if target is None:
        return f"{name}: {value:.2f}"
    op, bound = target
    met = value >= bound if op == ">=" else value <= bound
    return f"{name}: {value:.2f} (target {op} {bound:g}: {'met' if met else 'MISSED'})"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=60_000)
    parser.add_argument("--window", type=int, default=1_000)
    parser.add_argument("--seconds", type=float, default=5.0, help="stats polling time")
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.trials, args.seconds = 3_000, 1.0
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-")))
        redis = stack.enter_context(EmbeddedRedis(tmp / "redis"))
        env = {"COMMITTEE_REDIS_URL": redis.url, "COMMITTEE_LOG_LEVEL": "warning"}
        target = ["app.main:create_app", "--factory"]
        server = stack.enter_context(
            uvicorn("app", target, env, tmp, lambda h: h.get("/readyz").status_code == 200)
        )
        ws = server.url.replace("http://", "ws://")
        with httpx.Client(base_url=server.url, timeout=30) as http:
            for name in ("bulk", "live"):
                body = {
                    "name": name,
                    "labels": list(range(PROBLEM.k)),
                    "input": {"experts": {"expert_names": EXPERTS}},
                    "learner": {"kind": "committee", "alpha": 1.2},
                }
                http.post("/v1/models", json=body).raise_for_status()
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(2) as pool:
            pool.apply(pump, (f"{ws}/v1/models/bulk/stream", messages(2_000, 1), args.window))
            seconds = pool.apply(
                pump, (f"{ws}/v1/models/bulk/stream", messages(args.trials, 2), args.window)
            )
            load = pool.apply_async(
                pump,
                (
                    f"{ws}/v1/models/live/stream",
                    messages(int(1_000 * (args.seconds + 2)), 3),
                    64,
                    1_000.0,
                ),
            )
            time.sleep(1.0)  # the load is running
            latencies = pool.apply(poll_stats, (server.url, args.seconds))
            load.get()
    p50, p99 = np.percentile(latencies, [50, 99])
    print(f"stream_trials: {args.trials}")
    print(line("stats_requests", len(latencies)))
    print(line("stats_p50_ms", float(p50)))
    print(line("stats_p99_ms", float(p99)))
    print(line("stream_trials_per_second", args.trials / seconds))


if __name__ == "__main__":
    main()
