"""Live trials over one WebSocket, beside a WebSocket echo server, and dashboards'
statistics under load.

Serves the real app with one uvicorn worker against a private Redis, like
``bench/service.py``, and beside it the **echo** peer (``bench/_ws_echo.py``): the same
uvicorn, one Starlette WebSocket route that parses each JSON message with orjson and
answers it. One client sends the same messages to both, up to ``--window`` in flight,
and counts the answers as they come back: learn trials of S4's majority problem (n = 20,
r = 10, k = 5 labels ``c0``..``c4``, noise 0.05) to a Committee model, the sub-experts'
votes in each of three forms: a bare label (``"e3": "c2"``), a list of scores
(``"e3": [0, 0, 1, 0, 0]``) and a mapping (``"e3": {"c2": 1.0}``). Service and echo take
turns over ``--rounds`` rounds, best kept, spread printed; each run starts once the machine
is idle (``service.quiet``). Figures:

* per form, ``stream_trials_per_second_<form>``, ``ws_echo_messages_per_second_<form>``
  and ``stream_vs_ws_echo_<form>`` (targets: bare labels >= 0.5, lists and mappings >= 0.4);
* per form, ``batch_trials_per_second_<form>``: the same trials through ``learn/batch``
  (REST, 1,000 items per request, two clients);
* ``vote_forms_vs_bare_labels_stream`` and ``_batch``: the slowest form's trials/s over
  bare labels', over the stream and in REST batches, and ``vote_forms_vs_bare_labels``,
  the lower of the two (each >= 0.8);
* ``stats_p50_ms``/``stats_p99_ms``: ``GET /v1/models/{name}/stats`` polled back to back
  while a model takes 1,000 trials/s over another WebSocket (target p99 <= 5 ms);
* ``stream_trials_per_second``: bare labels, the figure of earlier runs (>= 10,000);
* last, the headline ``stream_vs_ws_echo``: the worst form's share of its echo.

The load runs in separate processes from the servers.

Run as ``python bench/stream.py [--quick] [--trials N] [--window W] [--rounds R] [--seconds S]``
(30,000 trials, 3 rounds, 5 s of polling, each side warmed by 500 messages per form);
``--quick`` is a smoke run: 1,000 trials, one round, 0.5 s of polling, 100 warm-up
messages.
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
from _results import recorded, target_line

from models.inputs.datasets import MajorityProblem

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service import quiet, uvicorn

from storage.server import EmbeddedRedis

PROBLEM = MajorityProblem(n=20, r=10, k=5, noise=0.05)
EXPERTS = [f"e{i}" for i in range(PROBLEM.n_experts)]
LABELS = [f"c{c}" for c in range(PROBLEM.k)]
FORMS = ("bare_labels", "score_lists", "score_mappings")
TARGETS = {
    "stream_trials_per_second": (">=", 10_000.0),
    "stats_p99_ms": ("<=", 5.0),
    "stream_vs_ws_echo_bare_labels": (">=", 0.5),
    "stream_vs_ws_echo_score_lists": (">=", 0.4),
    "stream_vs_ws_echo_score_mappings": (">=", 0.4),
    "stream_vs_ws_echo": (">=", 0.4),
    "vote_forms_vs_bare_labels": (">=", 0.8),
    "vote_forms_vs_bare_labels_stream": (">=", 0.8),
    "vote_forms_vs_bare_labels_batch": (">=", 0.8),
}
BATCH_ITEMS = 1_000  # items per learn/batch request
BATCH_CLIENTS = 2
WARM, QUICK_WARM = 500, 100  # messages warming each side on each form
BENCH_DIR = Path(__file__).resolve().parent


def vote(c: int, form: str) -> object:
    if form == "bare_labels":
        return LABELS[c]
    if form == "score_lists":
        return [1.0 if j == c else 0.0 for j in range(PROBLEM.k)]
    return {LABELS[c]: 1.0}


def messages(n: int, seed: int, form: str = "bare_labels") -> list[bytes]:
    """``learn`` requests: each expert votes for one label (its arg-max), in ``form``."""
    xs, ys, _ = PROBLEM.sample(n, np.random.default_rng(seed))
    out = []
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        votes = {EXPERTS[int(e)]: vote(int(c), form) for e, c in zip(x.expert, x.cls, strict=True)}
        msg = {"op": "learn", "id": i, "instance": {"experts": votes}, "label": LABELS[int(y)]}
        out.append(orjson.dumps(msg))
    return out


def batches(messages: list[bytes], items: int) -> list[bytes]:
    """The learns of ``messages`` as ``learn/batch`` bodies of ``items`` items each."""
    trials = []
    for m in messages:
        doc = orjson.loads(m)
        trials.append(orjson.dumps({"instance": doc["instance"], "label": doc["label"]}))
    return [
        b'{"items":[%s]}' % b",".join(trials[i : i + items]) for i in range(0, len(trials), items)
    ]


async def _post_batches(url: str, bodies: list[bytes], clients: int) -> float:
    """Post ``bodies`` from ``clients`` concurrent clients, each taking the next body
    when its last is answered; returns the seconds from the first to the last answer."""
    todo = iter(bodies)
    headers = {"content-type": "application/json"}

    async def client(http: httpx.AsyncClient) -> None:
        for body in todo:
            r = await http.post(url, content=body, headers=headers)
            r.raise_for_status()
            if b'"error":{' in r.content:
                raise RuntimeError(f"batch error: {r.text[:500]}")

    async with httpx.AsyncClient(timeout=120) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        return time.perf_counter() - start


def post_batches(url: str, bodies: list[bytes], clients: int = BATCH_CLIENTS) -> float:
    return asyncio.run(_post_batches(url, bodies, clients))


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


def line(name: str, value: float, rounds: Sequence[float] = ()) -> str:
    return target_line(name, value, TARGETS, rounds)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30_000, help="messages per run")
    parser.add_argument("--window", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="stats polling time")
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.trials, args.seconds, args.rounds = 1_000, 0.5, 1
    warm = QUICK_WARM if args.quick else WARM
    rates: dict[str, list[float]] = {}
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-")))
        redis = stack.enter_context(EmbeddedRedis(tmp / "redis"))
        env = {"COMMITTEE_REDIS_URL": redis.url, "COMMITTEE_LOG_LEVEL": "warning"}
        target = ["app.http.main:create_app", "--factory"]
        server = stack.enter_context(
            uvicorn("app", target, env, tmp, lambda h: h.get("/readyz").status_code == 200)
        )
        echo = stack.enter_context(
            uvicorn(
                "echo",
                ["_ws_echo:app", "--app-dir", str(BENCH_DIR)],
                {},
                tmp,
                lambda h: h.get("/healthz").status_code == 200,
            )
        )
        ws = server.url.replace("http://", "ws://")
        ws_echo = echo.url.replace("http://", "ws://")
        with httpx.Client(base_url=server.url, timeout=30) as http:
            for name in ("live", *FORMS, *(f"batch_{form}" for form in FORMS)):
                body = {
                    "name": name.replace("_", "-"),
                    "labels": LABELS,
                    "input": {"experts": {"expert_names": EXPERTS}},
                    "learner": {"kind": "committee", "alpha": 1.2},
                }
                http.post("/v1/models", json=body).raise_for_status()
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(2) as pool:
            msgs = {form: messages(args.trials, 2, form) for form in FORMS}
            bodies = {form: batches(msgs[form], BATCH_ITEMS) for form in FORMS}
            batch_urls = {
                form: f"{server.url}/v1/models/batch-{form.replace('_', '-')}/learn/batch"
                for form in FORMS
            }
            for form in FORMS:  # warm both: the learner's kernels, each form's code
                path = f"/v1/models/{form.replace('_', '-')}/stream"
                for base in (ws, ws_echo):
                    pool.apply(pump, (base + path, messages(warm, 1, form), args.window))
                warming = batches(messages(warm, 1, form), warm // 2)
                pool.apply(post_batches, (batch_urls[form], warming))
            for r in range(args.rounds):
                for form in FORMS:
                    path = f"/v1/models/{form.replace('_', '-')}/stream"
                    sides = [("stream", ws), ("ws_echo", ws_echo)]
                    for side, base in sides if r % 2 == 0 else sides[::-1]:
                        quiet(patience=0.0 if args.quick else 15.0)
                        seconds = pool.apply(pump, (base + path, msgs[form], args.window))
                        rates.setdefault(f"{side}_{form}", []).append(args.trials / seconds)
                    quiet(patience=0.0 if args.quick else 15.0)
                    seconds = pool.apply(post_batches, (batch_urls[form], bodies[form]))
                    rates.setdefault(f"batch_{form}", []).append(args.trials / seconds)
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
    best = {k: max(v) for k, v in rates.items()}
    print(f"stream_trials: {args.trials} per run, window {args.window}, rounds {args.rounds}")
    ratios = {}
    for form in FORMS:
        ours, theirs = f"stream_{form}", f"ws_echo_{form}"
        print(line(f"stream_trials_per_second_{form}", best[ours], rates[ours]))
        print(line(f"ws_echo_messages_per_second_{form}", best[theirs], rates[theirs]))
        ratios[form] = best[ours] / best[theirs]
        print(line(f"stream_vs_ws_echo_{form}", ratios[form]))
    for form in FORMS:
        print(
            line(f"batch_trials_per_second_{form}", best[f"batch_{form}"], rates[f"batch_{form}"])
        )
    forms = {
        way: min(best[f"{way}_{f}"] for f in FORMS) / best[f"{way}_bare_labels"]
        for way in ("stream", "batch")
    }
    for way, ratio in forms.items():
        print(line(f"vote_forms_vs_bare_labels_{way}", ratio))
    print(line("vote_forms_vs_bare_labels", min(forms.values())))
    bare = best["stream_bare_labels"]
    print(line("stats_requests", len(latencies)))
    print(line("stats_p50_ms", float(p50)))
    print(line("stats_p99_ms", float(p99)))
    print(line("stream_trials_per_second", bare))
    print(line("stream_vs_ws_echo", min(ratios.values())))


if __name__ == "__main__":
    with recorded("stream"):
        main()
