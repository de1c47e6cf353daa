"""Trials through the stream consumers (``committee consume``), each beside ``learn/batch``
over HTTP measured in the same run.

Serves the real app with one uvicorn worker against a private Redis, as
``bench/stream.py`` does, and beside it a ``nats-server -js`` of its own; one
``committee consume`` process reads a Redis stream (on the service's Redis) and one a
JetStream stream. The same learn trials (S4's majority problem, ``bench/stream.py``'s
messages, a Committee model per side) go

* to each source: every message one learn in the REST body's form, added as fast as the
  broker takes them (Redis: pipelined ``XADD``; NATS: published and flushed), timed from
  the first added to the last answered on the reply stream:
  ``consume_trials_per_second_redis`` and ``_nats``;
* through ``learn/batch``: 1,000 items per request, two clients, as ``bench/stream.py``
  sends them: ``batch_http_trials_per_second``.

Each consumer, one process as the service is one worker, applies each message exactly
once (its own idempotency record, its answer published to the reply stream), where the
HTTP batch keeps one answer per request. Sides take turns over ``--rounds`` rounds,
best kept, spread printed. Figures: the two consumers' rates, the batch's; per side the
CPU each trial costs the process that applies it (the consumer, or the service's worker)
and Redis (``INFO cpu``; the Redis source's own commands included, as that stream lives
on the service's Redis here); ``redis_bound_vs_batch_http_redis``, the rate at which
Redis alone would be busy all the time on the Redis source over the batch's rate, which
no consumer of that source can pass; each consumer's share of the batch
(``consume_vs_batch_http_redis``, ``_nats``, target >= 0.8) and last, the headline
``consume_vs_batch_http``, the lower of the two.

``--acceptance`` runs the issue's check instead: per broker, 4 consumer processes take
``--trials`` messages (50,000 by default there) while one is SIGKILLed and started
again; it prints how many messages' trials the log holds once, twice or not at all,
the answers published (one per delivery: at least one per message, the same for each),
and the messages left pending.

Run: ``python bench/consume.py [--quick] [--trials N] [--rounds R] [--acceptance]``
(30,000 messages, 3 rounds, each side warmed by 500 messages first); ``--quick`` is a
smoke run: 2,000 messages, one round, 100 warm-up messages.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import nats
import orjson
import redis as redis_py
from _results import recorded, target_line
from _service_load import cpu_seconds

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "app"))
from _brokers import ConsumerProcesses, create_model, learn_body, logged, nats_server
from service import quiet, uvicorn
from stream import EXPERTS, LABELS, batches, messages, post_batches

from storage.server import EmbeddedRedis

TARGETS = {
    "consume_vs_batch_http_redis": (">=", 0.8),
    "consume_vs_batch_http_nats": (">=", 0.8),
    "consume_vs_batch_http": (">=", 0.8),
}
BATCH_ITEMS = 1_000
SUBJECT = "committee.trials"
WARM, QUICK_WARM = 500, 100  # messages each side takes before the rounds


def line(name: str, value: float, rounds: Sequence[float] = ()) -> str:
    return target_line(name, value, TARGETS, rounds)


def bodies(msgs: list[bytes]) -> list[bytes]:
    """The learns of ``messages`` in the REST body's form."""
    out = []
    for m in msgs:
        doc = orjson.loads(m)
        out.append(orjson.dumps({"instance": doc["instance"], "label": doc["label"]}))
    return out


def through_redis(r: redis_py.Redis, stream: str, model: str, trials: list[bytes]) -> float:
    """Seconds from the first ``XADD`` to the last answer."""
    before = r.xlen(f"{stream}:replies")
    start = time.perf_counter()
    for i in range(0, len(trials), 1_000):
        pipe = r.pipeline(transaction=False)
        for body in trials[i : i + 1_000]:
            pipe.xadd(stream, {"model": model, "op": "learn", "body": body})
        pipe.execute()
    while r.xlen(f"{stream}:replies") < before + len(trials):
        time.sleep(0.005)
    return time.perf_counter() - start


async def _through_nats(url: str, model: str, trials: list[bytes]) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream()

    async def answered() -> int:
        try:
            return int((await js.stream_info("TRIALS_REPLIES")).state.messages)
        except nats.js.errors.NotFoundError:
            return 0

    before = await answered()
    start = time.perf_counter()
    for body in trials:
        await nc.publish(f"{SUBJECT}.{model}.learn", body)
    await nc.flush()
    while await answered() < before + len(trials):
        await asyncio.sleep(0.005)
    seconds = time.perf_counter() - start
    await nc.close()
    return seconds


def through_nats(url: str, model: str, trials: list[bytes]) -> float:
    return asyncio.run(_through_nats(url, model, trials))


async def _nats_stream(url: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="TRIALS", subjects=[f"{SUBJECT}.>"])
    await nc.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trials", type=int, help="messages per run [30,000; 50,000 with --acceptance]"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument(
        "--acceptance", action="store_true", help="4 consumers, one killed: exactly once"
    )
    args = parser.parse_args(argv)
    if args.acceptance:
        acceptance(args.trials or (2_000 if args.quick else 50_000))
        return
    n = args.trials or (2_000 if args.quick else 30_000)
    if args.quick:
        args.rounds = 1
    warm_up = QUICK_WARM if args.quick else WARM
    patience = 0.0 if args.quick else 15.0
    rates: dict[str, list[float]] = {}
    redis_us: dict[str, list[float]] = {}  # Redis's CPU per trial, each side's rounds
    own_us: dict[str, list[float]] = {}  # the applying process's CPU per trial
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-")))
        redis = stack.enter_context(EmbeddedRedis(tmp / "redis"))
        nats_url = stack.enter_context(nats_server())
        asyncio.run(_nats_stream(nats_url))
        env = {"COMMITTEE_REDIS_URL": redis.url, "COMMITTEE_LOG_LEVEL": "warning"}
        target = ["app.http.main:create_app", "--factory"]
        server = stack.enter_context(
            uvicorn("app", target, env, tmp, lambda h: h.get("/readyz").status_code == 200)
        )
        with httpx.Client(base_url=server.url, timeout=30) as http:
            for name in ("redis-m", "nats-m", "batch-m"):
                body = {
                    "name": name,
                    "labels": LABELS,
                    "input": {"experts": {"expert_names": EXPERTS}},
                    "learner": {"kind": "committee", "alpha": 1.2},
                }
                http.post("/v1/models", json=body).raise_for_status()
        procs = ConsumerProcesses("", env, tmp)
        stack.callback(procs.stop_all)
        procs.start("redis", "redis:#stream=trials,consumer=bench")
        procs.start("nats", f"{nats_url}#stream=TRIALS")
        r = stack.enter_context(redis_py.Redis.from_url(redis.url))
        msgs = messages(n, 2)
        trials = bodies(msgs)
        http_bodies = batches(msgs, BATCH_ITEMS)
        url = f"{server.url}/v1/models/batch-m/learn/batch"
        warm = bodies(messages(warm_up, 1))
        through_redis(r, "trials", "redis-m", warm)
        through_nats(nats_url, "nats-m", warm)
        post_batches(url, batches(messages(warm_up, 1), warm_up // 2))
        sides = {
            "redis": lambda: through_redis(r, "trials", "redis-m", trials),
            "nats": lambda: through_nats(nats_url, "nats-m", trials),
            "batch_http": lambda: post_batches(url, http_bodies),
        }
        order = list(sides)
        for k in range(args.rounds):
            for side in order[k % 3 :] + order[: k % 3]:
                quiet(patience=patience)
                procs.alive()
                pid = server.process.pid if side == "batch_http" else procs.running[side].pid
                before = redis_cpu(r), cpu_seconds(pid)
                rates.setdefault(side, []).append(n / sides[side]())
                redis_us.setdefault(side, []).append((redis_cpu(r) - before[0]) * 1e6 / n)
                own_us.setdefault(side, []).append((cpu_seconds(pid) - before[1]) * 1e6 / n)
    best = {k: max(v) for k, v in rates.items()}
    least = {k: min(v) for k, v in redis_us.items()}
    print(f"consume_trials: {n} per run, rounds {args.rounds}")
    print(line("consume_trials_per_second_redis", best["redis"], rates["redis"]))
    print(line("consume_trials_per_second_nats", best["nats"], rates["nats"]))
    print(line("batch_http_trials_per_second", best["batch_http"], rates["batch_http"]))
    for side in sides:
        # the process that applies the trials: the consumer, or the service's worker
        mine = min(own_us[side])
        print(line(f"applier_cpu_us_per_trial_{side}", mine, own_us[side]))
        print(line(f"redis_cpu_us_per_trial_{side}", least[side], redis_us[side]))
    # the rate at which Redis alone would be busy all the time, over the batch's rate:
    # what a consumer that spent nothing itself could reach
    print(line("redis_bound_vs_batch_http_redis", 1e6 / least["redis"] / best["batch_http"]))
    ratios = {b: best[b] / best["batch_http"] for b in ("redis", "nats")}
    for b, ratio in ratios.items():
        print(line(f"consume_vs_batch_http_{b}", ratio))
    print(line("consume_vs_batch_http", min(ratios.values())))


def redis_cpu(r: redis_py.Redis) -> float:
    """Seconds of CPU the Redis server has spent (user and system)."""
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def acceptance(n: int, workers: int = 4) -> None:
    """Per broker: ``workers`` consumers take ``n`` messages while one is killed and
    started again; what the log and the reply stream then hold."""
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-")))
        redis = stack.enter_context(EmbeddedRedis(tmp / "redis"))
        nats_url = stack.enter_context(nats_server())
        asyncio.run(_nats_stream(nats_url))
        prefix = f"a-{uuid.uuid4().hex[:8]}"
        env = {
            "COMMITTEE_REDIS_URL": redis.url,
            "COMMITTEE_KEY_PREFIX": prefix,
            "COMMITTEE_LOG_LEVEL": "warning",
            "COMMITTEE_CONSUME_CLAIM_IDLE_MS": "2000",
        }
        r = stack.enter_context(redis_py.Redis.from_url(redis.url))
        for broker in ("redis", "nats"):
            create_model(redis.url, prefix, broker)
            procs = ConsumerProcesses("", env, tmp)
            names = [f"{broker}{i}" for i in range(workers)]

            def start(name: str, broker: str = broker, procs: ConsumerProcesses = procs) -> None:
                if broker == "redis":
                    procs.start(name, f"redis:#stream=acc,consumer={name}")
                else:
                    procs.start(name, f"{nats_url}#stream=TRIALS")

            for name in names:
                start(name)
            start_time = time.perf_counter()
            answers, pending = _load(broker, r, nats_url, n, procs, start, names[1])
            seconds = time.perf_counter() - start_time
            procs.stop_all()
            counts = logged(redis.url, prefix, broker)
            once = sum(1 for i in range(n) if counts.get(i) == 1)
            twice = sum(1 for c in counts.values() if c > 1)
            missing = sum(1 for i in range(n) if i not in counts)
            first: dict[str, Any] = {}
            unlike = [(i, first[i], a) for i, a in answers if first.setdefault(i, a) != a]
            for i, a, b in unlike[:3]:
                print(f"  message {i}: first {a}, then {b}", file=sys.stderr)
            differing = len(unlike)
            print(line(f"acceptance_{broker}_messages", n))
            print(line(f"acceptance_{broker}_in_log_once", once))
            print(line(f"acceptance_{broker}_in_log_more_than_once", twice))
            print(line(f"acceptance_{broker}_missing_from_log", missing))
            print(line(f"acceptance_{broker}_answers_published", len(answers)))
            print(line(f"acceptance_{broker}_messages_answered", len(first)))
            print(line(f"acceptance_{broker}_answers_unlike_the_first", differing))
            print(line(f"acceptance_{broker}_pending", pending))
            print(line(f"acceptance_{broker}_seconds", seconds))


def _load(
    broker: str,
    r: redis_py.Redis,
    nats_url: str,
    n: int,
    procs: ConsumerProcesses,
    start: Any,
    victim: str,
) -> tuple[list[tuple[str, dict[str, Any]]], int]:
    """Add ``n`` messages, SIGKILL ``victim`` a third of the way and start it again,
    wait until every message is answered and none pending; (answers by id, pending)."""
    if broker == "redis":
        with contextlib.suppress(redis_py.ResponseError):  # (made by a consumer already)
            r.xgroup_create("acc", "committee", id="0", mkstream=True)
        for i in range(0, n, 1_000):
            pipe = r.pipeline(transaction=False)
            for j in range(i, min(n, i + 1_000)):
                pipe.xadd("acc", {"model": "redis", "op": "learn", "body": learn_body(j)})
            pipe.execute()

        def state() -> tuple[int, int]:
            return r.xlen("acc:replies"), int(r.xpending("acc", "committee")["pending"])

    else:

        async def publish() -> None:
            nc = await nats.connect(nats_url)
            for j in range(n):
                await nc.publish(f"{SUBJECT}.nats.learn", learn_body(j))
            await nc.flush()
            await nc.close()

        asyncio.run(publish())

        async def _state() -> tuple[int, int]:
            nc = await nats.connect(nats_url)
            js = nc.jetstream()
            try:
                replies = int((await js.stream_info("TRIALS_REPLIES")).state.messages)
                info = await js.consumer_info("TRIALS", "committee")
                return replies, int(info.num_ack_pending) + int(info.num_pending)
            except nats.js.errors.NotFoundError:
                return 0, n
            finally:
                await nc.close()

        def state() -> tuple[int, int]:
            return asyncio.run(_state())

    killed = False
    deadline = time.monotonic() + 1800
    while True:
        procs.alive()
        replies, pending = state()
        if not killed and replies >= n // 3:
            procs.kill(victim)
            start(victim)
            killed = True
        if killed and replies >= n and pending == 0:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{broker}: {replies} answers, {pending} pending after 30 min")
        time.sleep(0.2)
    return _answers(broker, r, nats_url), pending


def _answers(broker: str, r: redis_py.Redis, nats_url: str) -> list[tuple[str, dict[str, Any]]]:
    if broker == "redis":
        return [(f[b"id"].decode(), orjson.loads(f[b"answer"])) for _, f in r.xrange("acc:replies")]

    async def read() -> list[tuple[str, dict[str, Any]]]:
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        sub = await js.subscribe("committee.replies", ordered_consumer=True)
        info = await js.stream_info("TRIALS_REPLIES")
        out = []
        for _ in range(info.state.messages):
            m = await sub.next_msg(timeout=10)
            out.append(((m.headers or {})["Committee-Id"], orjson.loads(m.data)))
        await nc.close()
        return out

    return asyncio.run(read())


if __name__ == "__main__":
    with recorded(
        "consume",
        information=[
            "consume_trials_per_second_*",
            "batch_http_*",
            "applier_cpu_us_per_trial_*",
            "redis_cpu_us_per_trial_*",
            "redis_bound_*",
        ],
    ):
        main()
