"""A failover that loses entries a worker had applied, and others take their places.

The service talks to Redis through a proxy whose target is switched, as a managed Redis
endpoint moves to the promoted replica. The replica stops following; worker ``a`` learns
trials the primary applies and the replica never receives; the primary dies and the
replica takes over at an older version; worker ``b`` then appends other trials at the
same places. The log is back at the version ``a`` knows, with other entries: ``a`` must
notice, reload, and serve what a fresh replay of the log gives, and fold none of its
lost outcomes.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import orjson
import pytest
from _procs import assert_same_state, learner_state, replay
from _proxy import Proxy
from harness.redis_cluster import LocalSentinel, sync_client

from app.core.settings import Settings
from app.service.model_service import ModelService
from storage.client import close, connect
from storage.errors import Unavailable
from storage.repository import ModelStore

pytestmark = pytest.mark.anyio
T = TypeVar("T")
PREFIX = "div"
CONFIG: dict[str, Any] = {
    "labels": [1, -1],
    "input": {"attributes": {"n_features": 30}},
    "learner": {"kind": "winnow"},
    "label_ttl": 60.0,
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def pair() -> Iterator[tuple[LocalSentinel, Proxy]]:
    """A primary and its replica (no sentinels: the test fails over by hand), and the
    proxy the service reaches the primary through."""
    with tempfile.TemporaryDirectory(prefix="div-") as d, LocalSentinel(Path(d), sentinels=0) as p:
        proxy = Proxy(("127.0.0.1", p.primary)).start()
        try:
            yield p, proxy
        finally:
            proxy.stop()


def trials(n: int, seed: int) -> list[tuple[dict[str, Any], int]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        active = rng.choice(30, 6, replace=False)
        out.append(({"features": {str(i): 1.0 for i in active}}, 1 if active.min() < 5 else -1))
    return out


async def retried(call: Callable[[], Awaitable[T]]) -> T:
    for _ in range(3):
        try:
            return await call()
        except Unavailable:
            await asyncio.sleep(0.1)
    return await call()


async def test_a_worker_whose_applied_entries_a_failover_lost_reloads(
    pair: tuple[LocalSentinel, Proxy],
) -> None:
    nodes, proxy = pair
    settings = Settings(redis_url=proxy.url, key_prefix=PREFIX, snapshot_every=4, log_retain=100)
    clients = [connect(proxy.url) for _ in range(2)]
    a, b = (ModelService(ModelStore(c, PREFIX), settings) for c in clients)
    try:
        await a.create_model("m", CONFIG)
        await a.trials.learn("m", trials(5, 0))
        await asyncio.sleep(0.2)  # outcomes folded, a snapshot taken
        with sync_client(f"redis://127.0.0.1:{nodes.primary}/0") as r:
            assert r.wait(1, 5000) == 1  # the replica has all of it

        # the replica stops following with what it has: entries 1-5
        with sync_client(f"redis://127.0.0.1:{nodes.replica}/0") as r:
            r.execute_command("REPLICAOF", "NO", "ONE")
        lost = await a.trials.learn("m", trials(7, 1))  # applied by the primary alone
        assert all(isinstance(r, dict) for r in lost)
        assert (await a.export_state("m"))[0] == 12

        # the primary dies and the replica takes over
        nodes.kill(nodes.primary)
        with sync_client(f"redis://127.0.0.1:{nodes.replica}/0") as r:
            assert int(r.hget(f"{PREFIX}:{{m}}:meta", "version")) == 5
        proxy.target = ("127.0.0.1", nodes.replica)
        proxy.reset()

        # a worker that never saw the lost entries appends others at their places
        await b.trials.learn("m", trials(7, 2))
        # (a connection that went through the failover may fail once: a 503 to retry)
        version, state = await retried(lambda: a.export_state("m"))
        assert version == 12
        assert state == (await b.export_state("m"))[1]

        # and both serve what the log holds, with the counters it gives
        new_url = f"redis://127.0.0.1:{nodes.replica}/0"
        for _ in range(100):
            stored = await b.store.read("m")
            if stored.folded == stored.version:
                break
            await asyncio.sleep(0.05)
        rep = replay(new_url, PREFIX, "m")
        assert rep.model.version == 12
        assert_same_state(orjson.loads(rep.model.export()), state)
        assert stored.folded == 12
        assert stored.counters["mistakes"] == rep.mistakes
        assert stored.counters["updates"] == rep.updates
        # the snapshot, whoever wrote it, is a state the log gives
        snap = await b.store.read_snapshot("m")
        assert snap is not None
        at = replay(new_url, PREFIX, "m", states_at=frozenset({snap[0]}))
        assert_same_state(learner_state(snap[1]), at.states[snap[0]])
    finally:
        for s, c in zip((a, b), clients, strict=True):
            await s.close()
            await close(c)
