"""Chaos: ``committee serve --workers 4`` against a Redis that fails in every way we can make it.

Clients predict, label and learn on kept models and on a model another client deletes and
creates again; meanwhile workers and Redis are SIGKILLed, Redis restarts, and a proxy
between the service and Redis delays, drops and half-closes. Requests that meet a 503 or
a broken connection are sent again as the Python client does. Afterwards every invariant
of :func:`_chaos.check_service` must hold: each acknowledged answer is in the log once and
as answered, the log replays to the state served, no model is broken, no key is orphaned.

One service serves the whole module (starting 4 workers costs seconds each time); each
scenario has models of its own, and the checks after it cover every model and key left
by the scenarios before it too.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
import uuid
from collections.abc import Awaitable, Iterator
from itertools import islice

import httpx
import orjson
import pytest
import redis.asyncio as aioredis
from _chaos import GRAVE_FILL, Load, Sent, check_service
from _procs import Service, majority_model
from _proxy import ProxiedRedis

from app.service.live_model import build_model
from app.service.model_service import request_digest
from storage.client import close, connect
from storage.codec import encode_instance
from storage.keys import Keys, Registry
from storage.repository import Idempotency, LearnGroup, ModelStore

PREFIX = "chaos"
# a snapshot every few trials. The kernel warm-up stays on: a worker compiles the request
# body reader's and the learners' kernels in a thread before /readyz, which the service's
# start waits for, and a worker uvicorn starts again loads them from the cache that filled.
# Without it the first requests compile them on the event loop, and on a fresh numba cache
# a worker answers nothing for tens of seconds (over a minute on a loaded machine), not
# even a read, and the Redis replies it awaits meanwhile time out as 503s.
ENV = {"COMMITTEE_SNAPSHOT_EVERY": "5"}
CLIENTS = 16


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ProxiedRedis, Service]]:
    """A Redis of the module's own behind a proxy, and the service on 4 workers over it."""
    path = tmp_path_factory.mktemp("chaos")
    with (
        ProxiedRedis(path) as db,
        Service(path, workers=4, redis_url=db.url, prefix=PREFIX, env=ENV) as svc,
    ):
        yield db, svc


@pytest.fixture
def rig(service: tuple[ProxiedRedis, Service]) -> tuple[ProxiedRedis, Service]:
    """The service, all its workers up and the proxy passing everything."""
    db, svc = service
    assert db.proxy is not None
    db.proxy.fault("pass")
    db.proxy.events.clear()
    wait_workers(svc)
    return db, svc


class Clients:
    """The clients of one scenario, recording into ``load``."""

    def __init__(self, load: Load) -> None:
        self.load = load
        self.rng = random.Random(load.rng.random())

    async def predict_label(self, c: httpx.AsyncClient, name: str) -> None:
        x, y = next(self.load.data)
        p = await self.load.send(c, "predict", name, {"instance": x, "trial_id": uuid.uuid4().hex})
        if p.status == 200:
            await self.load.send(c, "label", name, {"trial_id": p.answer["trial_id"], "label": y})

    async def learn(self, c: httpx.AsyncClient, name: str, n: int) -> None:
        items = [{"instance": x, "label": y} for x, y in islice(self.load.data, n)]
        op, body = ("learn", items[0]) if n == 1 else ("learn/batch", {"items": items})
        await self.load.send(c, op, name, body, uuid.uuid4().hex)

    async def create(self, c: httpx.AsyncClient, name: str) -> Sent:
        return await self.load.send(c, "create", name, majority_model(name), uuid.uuid4().hex)

    async def trials(self, c: httpx.AsyncClient) -> None:
        names = self.load.kept + self.load.churned
        while not self.load.stop.is_set():
            name, op = self.rng.choice(names), self.rng.random()
            if op < 0.4:
                await self.predict_label(c, name)
            else:
                await self.learn(c, name, 1 if op < 0.75 else 3)

    async def churn(self, c: httpx.AsyncClient, name: str, rounds: int) -> None:
        """Delete ``name`` and create it again; now and then with enough trials kept
        that the delete leaves them in a grave."""
        for _ in range(rounds):
            if self.rng.random() < 0.3:
                items = [
                    {"instance": x, "trial_id": uuid.uuid4().hex}
                    for x, _ in islice(self.load.data, GRAVE_FILL)
                ]
                await self.load.send(c, "predict/batch", name, {"items": items})
            await self.load.send(c, "delete", name, key=uuid.uuid4().hex)
            await asyncio.sleep(self.rng.uniform(0, 0.3))
            await self.create(c, name)
            await asyncio.sleep(self.rng.uniform(0, 0.4))

    async def run(
        self,
        *,
        churners: int = 0,
        rounds: int = 0,
        faults: Awaitable[None] | None = None,
        watch: Awaitable[None] | None = None,
    ) -> None:
        """Create the models; trials go on until the churners and ``faults`` are done
        (``watch`` runs alongside and must stop once ``load.stop`` is set)."""
        load = self.load
        pools = [httpx.AsyncClient(base_url=load.url, timeout=60) for _ in range(4)]
        try:
            for name in load.kept + load.churned:
                assert (await self.create(pools[0], name)).status == 201
            side = [asyncio.ensure_future(self.trials(pools[i % 4])) for i in range(CLIENTS)]
            if watch is not None:
                side.append(asyncio.ensure_future(watch))
            try:
                churn = [
                    self.churn(pools[i % 4], n, rounds)
                    for n in load.churned
                    for i in range(churners)
                ]
                await asyncio.gather(*churn, *([faults] if faults else []))
            finally:
                load.stop.set()
                await asyncio.gather(*side)
        finally:
            for pool in pools:
                await pool.aclose()


def wait_workers(svc: Service, timeout: float = 60.0) -> None:
    """Until uvicorn has replaced every killed worker."""
    deadline = time.monotonic() + timeout
    while len(svc.worker_pids()) != svc.workers:
        assert time.monotonic() < deadline, f"workers: {svc.worker_pids()}"
        time.sleep(0.1)


def test_delete_and_create_race_trials_on_other_workers(rig: tuple[ProxiedRedis, Service]) -> None:
    db, svc = rig
    load = Load(svc.url, kept=["race-k0", "race-k1"], churned=["race-c0"], seed=1)
    seen: list[tuple[bool, bool]] = []  # (listed, meta exists), read at once
    codes: list[int] = []

    async def listing() -> None:
        meta = Keys(PREFIX, "race-c0").meta
        async with aioredis.Redis.from_url(db.direct_url) as r:
            while not load.stop.is_set():
                async with r.pipeline(transaction=True) as p:
                    p.hexists(Registry(PREFIX).models, "race-c0")
                    p.exists(meta)
                    listed, exists = await p.execute()
                seen.append((bool(listed), bool(exists)))
                await asyncio.sleep(0.005)

    async def reads() -> None:
        paths = ("", "/race-c0", "/race-c0/state", "/race-c0/stats")
        async with httpx.AsyncClient(base_url=svc.url, timeout=60) as c:
            while not load.stop.is_set():
                codes.extend([(await c.get(f"/v1/models{p}")).status_code for p in paths])

    async def watch() -> None:
        await asyncio.gather(listing(), reads())

    asyncio.run(Clients(load).run(churners=2, rounds=5, watch=watch()))
    # a model is listed whenever it exists (a name may be listed a moment longer: while
    # a create or delete of it is under way; readers skip it then)
    assert [(listed, exists) for listed, exists in seen if exists and not listed] == []
    assert {True, False} <= {exists for _, exists in seen}  # it saw the model come and go
    assert set(codes) <= {200, 404}, sorted(set(codes))
    assert {s.status for s in load.sent if s.op == "delete"} >= {204}
    check_service(svc.url, db.direct_url, PREFIX, load, svc.log_path)


@pytest.mark.slow
def test_sigkill_of_workers_and_of_redis_at_random_points(
    rig: tuple[ProxiedRedis, Service],
) -> None:
    db, svc = rig
    load = Load(svc.url, kept=["kill-k0"], churned=["kill-c0"], seed=2)
    rng = random.Random(2)
    killed: list[str] = []

    async def kill() -> None:
        for victim in rng.sample(["worker"] * 6 + ["redis"] * 3, 9):
            await load.until(rng.randrange(10, 60))
            if victim == "worker":
                while not (pids := svc.worker_pids()):  # all killed: wait for one
                    await asyncio.sleep(0.05)
                os.kill(rng.choice(pids), signal.SIGKILL)
            else:
                await asyncio.to_thread(db.kill)
            killed.append(victim)

    asyncio.run(Clients(load).run(churners=2, rounds=5, faults=kill()))
    assert len(killed) == 9
    wait_workers(svc)
    assert sum(load.retries.values()) > 0
    check_service(svc.url, db.direct_url, PREFIX, load, svc.log_path)


def test_a_redis_restart_mid_load(rig: tuple[ProxiedRedis, Service]) -> None:
    db, svc = rig
    load = Load(svc.url, kept=["restart-k0", "restart-k1"], churned=["restart-c0"], seed=3)

    async def restart() -> None:
        await load.until(random.Random(3).randrange(50, 150))
        await asyncio.to_thread(db.restart, 0.5)
        await load.until(100)

    asyncio.run(Clients(load).run(churners=1, rounds=3, faults=restart()))
    assert load.retries["503"] > 0
    check_service(svc.url, db.direct_url, PREFIX, load, svc.log_path)


@pytest.mark.slow
def test_a_proxy_that_delays_drops_and_half_closes(rig: tuple[ProxiedRedis, Service]) -> None:
    db, svc = rig
    proxy = db.proxy
    assert proxy is not None
    load = Load(svc.url, kept=["proxy-k0", "proxy-k1"], churned=["proxy-c0"], seed=4)

    async def faults() -> None:
        for mode, rate, delay, hold in 2 * (
            ("delay", 1.0, 0.4, 1.5),
            ("drop", 0.2, 0, 2.0),
            ("half-open", 0.3, 0, 1.0),
        ):
            await load.until(50)
            proxy.fault(mode, rate=rate, delay=delay)
            await asyncio.sleep(hold)
            proxy.fault("pass")

    asyncio.run(Clients(load).run(churners=1, rounds=4, faults=faults()))
    assert {"delayed", "dropped", "stalled"} <= set(proxy.events), proxy.events
    assert load.retries["503"] > 0
    check_service(svc.url, db.direct_url, PREFIX, load, svc.log_path)
    # a key used again with another body is refused, and changes nothing
    first = next(s for s in load.of("proxy-k0", "learn") if s.status == 200)
    other = {**first.body, "label": (first.body["label"] + 1) % 5}
    headers = {"Idempotency-Key": first.key or ""}
    got = httpx.post(f"{svc.url}/v1/models/proxy-k0/learn", json=other, headers=headers)
    assert got.status_code == 409, got.text


async def learn_as_a_worker(url: str, name: str, raw: bytes, key: str) -> int:
    """Run the LEARN script for body ``raw`` with ``key`` as a worker does, and keep no
    answer (that worker dies next); returns the entry's seq."""
    body = orjson.loads(raw)
    clients = connect(url)
    try:
        store = ModelStore(clients, PREFIX)
        m = await store.read(name)
        space, form, _ = build_model(m.config)
        x = encode_instance(space.encode(body["instance"], form))
        idem = Idempotency(key, request_digest("learn", name, raw))
        group = LearnGroup([(x, space.class_of(body["label"]))], idem)
        _, [got] = await store.learn(
            name, m.incarnation, m.version, fold=b"", limit=1, keep_ms=60_000, groups=[group]
        )
        assert got.status == "ok", got
        return got.first
    finally:
        await close(clients)


def test_a_learn_retried_after_its_worker_died_gets_the_first_answer(
    rig: tuple[ProxiedRedis, Service],
) -> None:
    """The point the random kills above hit now and then, made certain: the LEARN script
    ran, its worker died before keeping the answer, snapshots were taken since, and the
    retry reaches a worker that loaded the model from one of them."""
    db, svc = rig
    name, key = "retry-k0", uuid.uuid4().hex
    load = Load(svc.url, kept=[name], churned=[], seed=5)
    x, y = next(load.data)
    raw = orjson.dumps({"instance": x, "label": y})
    c = httpx.Client(base_url=svc.url, timeout=60)
    with c:
        assert c.post("/v1/models", json=majority_model(name)).status_code == 201
        seq = asyncio.run(learn_as_a_worker(db.direct_url, name, raw, key))
        for other, label in islice(load.data, 10):  # snapshots past it (every 5 trials)
            body = {"instance": other, "label": label}
            assert c.post(f"/v1/models/{name}/learn", json=body).is_success
        for pid in svc.worker_pids():
            os.kill(pid, signal.SIGKILL)
        wait_workers(svc)
        headers = {"Idempotency-Key": key, "content-type": "application/json"}
        got: httpx.Response | None = None
        for _ in range(100):  # sent again while the workers start, as the client does
            try:
                got = c.post(f"/v1/models/{name}/learn", content=raw, headers=headers)
            except httpx.TransportError:  # on a kept-alive connection of a killed worker
                time.sleep(0.1)
                continue
            if got.status_code != 503:
                break
            time.sleep(0.1)
    assert got is not None, f"retry of learn entry {seq}: no answer in 100 attempts"
    assert got.status_code == 200, f"retry of learn entry {seq}: {got.status_code} {got.text}"
