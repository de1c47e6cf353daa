"""Faults of a Redis Cluster or of a primary watched by Sentinel under load, with
COMMITTEE_ACK=replicated: a primary killed mid-load, and (on the cluster) a busy slot
moved. Every acknowledged trial must be in the log exactly once afterwards, and every
host's workers must agree with a fresh replay of the log."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
from _procs import (
    Service,
    assert_same_state,
    check_answers,
    majority_model,
    majority_payloads,
    replay,
    wait_folded,
)
from _server import ServerThread
from _workers import from_each_worker
from harness.redis_cluster import LocalSentinel, RedisCluster

from app.core.settings import Settings
from storage.keys import Keys
from storage.topology import SentinelConnection, parse_topology

pytestmark = pytest.mark.cluster
CLIENTS = 8
CLOSE = {"Connection": "close"}
REPLICATED = {"COMMITTEE_ACK": "replicated", "COMMITTEE_ACK_TIMEOUT_MS": "5000"}


@pytest.fixture
def cluster() -> Iterator[RedisCluster]:
    with tempfile.TemporaryDirectory(prefix="cf-") as d, RedisCluster(Path(d)) as c:
        yield c


@pytest.fixture
def sentinel() -> Iterator[LocalSentinel]:
    with tempfile.TemporaryDirectory(prefix="sf-") as d, LocalSentinel(Path(d)) as s:
        yield s


RETRY_FOR = 60.0  # seconds a request is retried while the service answers 503


class RetryingLoad:
    """Clients predicting then labelling, and learning, over several hosts; a request is
    sent again (the same body, the same trial id) after a 503 or a lost connection, as the
    Python client does. Records what was acknowledged."""

    def __init__(self, urls: list[str], name: str, seed: int) -> None:
        self.urls = urls
        self.name = name
        self.data = iter(majority_payloads(20_000, np.random.default_rng(seed)))
        self.predicted: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.labelled: list[tuple[str, int, dict[str, Any]]] = []
        self.learned: list[tuple[dict[str, Any], int, dict[str, Any]]] = []
        self.unexpected: list[str] = []
        self.retries = 0
        self.transport: list[str] = []
        self.stop = asyncio.Event()
        self.served: list[float] = []  # when each attempt answered 200 was sent
        self.outage: list[float] = []  # the fault's start and end, as the fault marks them

    def felt(self) -> bool:
        """Whether the load met the outage: a request was refused and sent again, or one
        sent while the primary was down was answered (it waited out the failover). A
        write waiting for its replica may be confirmed once the node is back, so a
        failover need not refuse anything."""
        a, z = self.outage
        return self.retries > 0 or any(a <= t <= z for t in self.served)

    def run_through(self, fault: Callable[[], Awaitable[None]], first: float = 2.0) -> None:
        """Run the clients; ``first`` seconds in, ``fault``; 2 s after it returns, stop.
        Every request answered as expected, within 120 s in all."""

        async def run() -> None:
            clients = [asyncio.ensure_future(self.client(i)) for i in range(CLIENTS)]
            await asyncio.sleep(first)
            await fault()
            await asyncio.sleep(2.0)
            self.stop.set()
            await asyncio.gather(*clients)

        start = time.monotonic()
        asyncio.run(run())
        assert time.monotonic() - start < 120
        assert self.unexpected == [], (self.unexpected[:5], self.transport[:5])

    async def send(self, c: httpx.AsyncClient, path: str, body: dict[str, Any]) -> Any:
        # a client retries a 503 for as long as a failover takes here (a loaded machine's
        # sentinels may need several seconds), within the run's 120 s
        deadline = time.monotonic() + RETRY_FOR
        while time.monotonic() < deadline:
            sent = time.monotonic()
            try:
                r = await c.post(f"/v1/models/{self.name}/{path}", json=body)
            except httpx.TransportError as e:
                self.transport.append(f"{path}: {e!r}")
                r = None
            if r is not None and r.status_code == 200:
                self.served.append(sent)
                return r.json()
            if r is not None and r.status_code != 503:
                self.unexpected.append(f"{path}: {r.status_code} {r.text}")
                return None
            self.retries += 1
            await asyncio.sleep(0.05)
        self.unexpected.append(f"{path}: still unavailable")
        return None

    async def client(self, i: int) -> None:
        url = self.urls[i % len(self.urls)]
        async with httpx.AsyncClient(base_url=url, timeout=10) as c:
            n = 0
            while not self.stop.is_set():
                x, y = next(self.data)
                n += 1
                if n % 2:
                    p = await self.send(c, "predict", {"instance": x, "trial_id": f"c{i}-{n}"})
                    if p is None:
                        continue
                    self.predicted.append((x, p))
                    got = await self.send(c, "label", {"trial_id": p["trial_id"], "label": y})
                    if got is not None:
                        self.labelled.append((p["trial_id"], y, got))
                else:
                    # a learn's retries are told apart from new learns by this key
                    headers = {"Idempotency-Key": f"k{i}-{n}"}
                    body = {"instance": x, "label": y}
                    got = await self.learn(c, body, headers)
                    if got is not None:
                        self.learned.append((x, y, got))

    async def learn(
        self, c: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str]
    ) -> Any:
        for _ in range(200):
            try:
                r = await c.post(f"/v1/models/{self.name}/learn", json=body, headers=headers)
            except httpx.TransportError:
                r = None
            if r is not None and r.status_code == 200:
                return r.json()
            if r is not None and r.status_code != 503:
                self.unexpected.append(f"learn: {r.status_code} {r.text}")
                return None
            self.retries += 1
            await asyncio.sleep(0.05)
        return None


def test_a_primary_killed_mid_load_loses_no_acknowledged_trial(
    cluster: RedisCluster, tmp_path: Path
) -> None:
    name = "majority"
    prefix = "failover"
    url = cluster.seed_url
    with (
        Service(tmp_path, workers=2, redis_url=url, prefix=prefix, env=REPLICATED) as a,
        Service(tmp_path, workers=2, redis_url=url, prefix=prefix, env=REPLICATED) as b,
        httpx.Client(base_url=a.url, timeout=60) as c,
    ):
        assert c.post("/v1/models", json=majority_model(name)).status_code == 201
        load = RetryingLoad([a.url, b.url], name, seed=3)
        victim = cluster.primary_of_key(Keys(prefix, name).meta)

        async def fault() -> None:
            load.outage.append(time.monotonic())
            os.kill(cluster.processes[victim].pid, signal.SIGKILL)
            # its replica takes over; until the killed node is back as the new primary's
            # replica, no write can be confirmed replicated: each waits for it or is a 503
            await asyncio.sleep(3.0)
            await asyncio.to_thread(cluster.restart, victim)
            load.outage.append(time.monotonic())

        load.run_through(fault)
        assert load.felt()
        assert cluster.primary_of_key(Keys(prefix, name).meta) != victim
        state = agreed_state(c, [a, b], name)
    check_replay(url, prefix, name, state, load)


def test_through_sentinel_a_primary_killed_mid_load_loses_no_acknowledged_trial(
    sentinel: LocalSentinel, tmp_path: Path
) -> None:
    """Two hosts on ``redis+sentinel://``: the primary is SIGKILLed under load, the
    sentinels promote its replica, and the old primary comes back as the new one's
    replica (until then nothing can be confirmed replicated: 503s, retried)."""
    name = "majority"
    prefix = "sentinel"
    with (
        Service(tmp_path, workers=2, redis_url=sentinel.url, prefix=prefix, env=REPLICATED) as a,
        Service(tmp_path, workers=2, redis_url=sentinel.url, prefix=prefix, env=REPLICATED) as b,
        httpx.Client(base_url=a.url, timeout=60) as c,
    ):
        assert c.post("/v1/models", json=majority_model(name)).status_code == 201
        load = RetryingLoad([a.url, b.url], name, seed=7)
        victim = sentinel.primary_port()
        promoted: list[int] = []

        async def fault() -> None:
            load.outage.append(time.monotonic())
            sentinel.kill(victim)
            promoted.append(await asyncio.to_thread(sentinel.wait_failover, victim))
            await asyncio.to_thread(sentinel.restart, victim)
            load.outage.append(time.monotonic())

        load.run_through(fault)
        assert load.felt()
        assert promoted == [sentinel.replica]
        state = agreed_state(c, [a, b], name)
        # (on a loaded machine the sentinels may have failed over again since)
        now = sentinel.primary_port()
    check_replay(f"redis://127.0.0.1:{now}/0", prefix, name, state, load)


def test_a_sentinel_connection_idle_through_a_failover_reaches_the_new_primary(
    sentinel: LocalSentinel,
) -> None:
    """A worker's script connection, unused while its primary is killed, the replica
    promoted and the old primary restarted, next reaches the new primary, not the old one
    back on its port (a primary of its own until the sentinels make it the new one's
    replica): there the service's check of the primary would find no replica and refuse
    every write."""

    async def run() -> tuple[int, dict[str, str]]:
        t = parse_topology(sentinel.url)
        assert t.auth is not None
        conn = SentinelConnection(t.nodes, t.master, t.auth, timeout=5.0)
        try:
            await conn.call("PING")
            victim = sentinel.primary_port()
            sentinel.kill(victim)
            await asyncio.to_thread(sentinel.wait_failover, victim)
            await asyncio.to_thread(sentinel.restart, victim)
            # (on a loaded machine the sentinels may have failed over again since)
            now = sentinel.primary_port()
            info = _info(await conn.call("INFO", "replication"))
            await conn.call("SET", "{idle}:after", "1")
            return now, info
        finally:
            await conn.aclose()

    now, info = asyncio.run(run())
    assert info["role"] == "master" and int(info["connected_slaves"]) == 1
    assert sentinel.client(now).get("{idle}:after") == b"1"


def _info(raw: bytes) -> dict[str, str]:
    lines = raw.decode().splitlines()
    return dict(line.split(":", 1) for line in lines if ":" in line)


def test_a_busy_models_slot_moves_mid_load_and_nothing_is_lost_or_doubled(
    cluster: RedisCluster, tmp_path: Path
) -> None:
    """The slot of a model under load moves to another primary, a few keys at a time:
    clients meet it half moved (ASK) and then moved (MOVED)."""
    name = "majority"
    prefix = "moving"
    url = cluster.seed_url
    with (
        Service(tmp_path, workers=2, redis_url=url, prefix=prefix) as a,
        Service(tmp_path, workers=2, redis_url=url, prefix=prefix) as b,
        httpx.Client(base_url=a.url, timeout=60) as c,
    ):
        assert c.post("/v1/models", json=majority_model(name)).status_code == 201
        load = RetryingLoad([a.url, b.url], name, seed=5)
        meta = Keys(prefix, name).meta
        slot = cluster.slot_of(meta)
        source = cluster.primary_of_slot(slot)
        target = next(p for p in cluster.primaries() if p != source)
        moved: list[int] = []

        async def fault() -> None:
            moved.append(
                await asyncio.to_thread(cluster.migrate_slot, slot, target, batch=5, pause=0.05)
            )

        load.run_through(fault, first=1.5)
        assert cluster.primary_of_slot(slot) == target and moved[0] > 0
        state = agreed_state(c, [a, b], name)
    check_replay(url, prefix, name, state, load)


def agreed_state(c: httpx.Client, hosts: list[Service], name: str) -> dict[str, Any]:
    """The model's state once folded, after checking every worker of every host serves
    that same state."""
    wait_folded(c, name)
    state: dict[str, Any] = c.get(f"/v1/models/{name}/state").json()
    for svc in hosts:
        with httpx.Client(base_url=svc.url, timeout=60) as h:
            answers = from_each_worker(
                svc.workers, lambda h=h: h.get(f"/v1/models/{name}/state", headers=CLOSE)
            )
        for s in answers.values():
            assert s.status_code == 200 and s.json() == state
    return state


def check_replay(
    url: str, prefix: str, name: str, state: dict[str, Any], load: RetryingLoad
) -> None:
    """A fresh replay of the log gives the served state, and holds every acknowledged
    trial exactly once, as it was answered."""
    rep = replay(url, prefix, name)
    assert rep.model.version == state["model_version"]
    assert_same_state(orjson.loads(rep.model.export()), state["state"])
    check_answers(rep, load.predicted, load.labelled, load.learned)


def test_a_write_waiting_its_whole_ack_timeout_for_a_replica_is_a_503_that_says_so(
    sentinel: LocalSentinel,
) -> None:
    """A write waits up to COMMITTEE_ACK_TIMEOUT_MS for its replica on the shared script
    connection, whose watchdog must outwait it: the answer is the write's own 503, and
    the connection serves the next write."""
    settings = Settings(
        redis_url=sentinel.url, key_prefix="slow", ack="replicated", ack_timeout_ms=5_500
    )
    model = {"name": "m", "labels": ["a", "b"], "input": {"attributes": {"n_features": 2}}}
    learn = {"instance": {"features": [1, 0]}, "label": "a"}
    with ServerThread(settings) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        made = c.post("/v1/models", json={**model, "learner": {"kind": "winnow"}})
        assert made.status_code == 201, made.text
        assert c.post("/v1/models/m/learn", json=learn).status_code == 200
        replica = sentinel.processes[sentinel.replica].pid
        os.kill(replica, signal.SIGSTOP)
        try:
            r = c.post("/v1/models/m/learn", json=learn)
        finally:
            os.kill(replica, signal.SIGCONT)
        assert r.status_code == 503, r.text
        assert "within 5500 ms" in r.json()["detail"], r.text
        again = c.post("/v1/models/m/learn", json=learn)
        assert again.status_code == 200, again.text
