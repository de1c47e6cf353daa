"""Scripts declare every key they touch: on a Redis Cluster a slot being moved is then
never half seen.

While a slot moves, its keys leave the old primary a few at a time. A script whose
declared keys are split between the two nodes is refused (``TRYAGAIN``) until the move
ends, and then runs whole on the new primary. A script reaching a key it did not declare
would run on the old primary, find the moved key missing, and lose the write silently.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import pytest
from harness.redis_cluster import RedisCluster

from models.core.instance import Attributes
from storage import topology
from storage.client import close, connect
from storage.codec import encode_instance
from storage.errors import Unavailable
from storage.repository import GRAVE_BATCH, ModelStore

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]
CONFIG = {"labels": ["a", "b"], "input": {"attributes": {"n_features": 4}}}
PREFIX = "ck"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    with RedisCluster(Path(tmp_path_factory.mktemp("cluster-keys"))) as c:
        yield c


@pytest.fixture
async def store(
    cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[ModelStore]:
    monkeypatch.setattr(topology, "RETRY_FOR", 0.3)  # give up on a moving slot soon
    clients = connect(cluster.seed_url)
    yield ModelStore(clients, PREFIX)
    await close(clients)


def start_moving(cluster: RedisCluster, keys: list[str]) -> tuple[int, int]:
    """Mark the slot of ``keys`` migrating to another primary and move ``keys`` alone
    there; returns (slot, the new primary's port)."""
    slot = cluster.slot_of(keys[0])
    src = cluster.primary_of_slot(slot)
    dst = next(p for p in cluster.primaries() if p != src)
    c_src, c_dst = cluster.client(src), cluster.client(dst)
    c_dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", cluster.node_id(src))
    c_src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", cluster.node_id(dst))
    c_src.execute_command("MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", *keys)
    return slot, dst


async def test_a_fold_waits_for_a_trial_hash_that_moved_ahead_of_its_model(
    cluster: RedisCluster, store: ModelStore
) -> None:
    made = await store.create("m", CONFIG, n_classes=2, size=4, most=100)
    inc = made.incarnation
    x = encode_instance(Attributes([1], [1.0]))
    await store.predict(
        "m",
        inc,
        0,
        strict=True,
        ttl_ms=60_000,
        fold=b"",
        limit=10,
        most_pending=100,
        items=[("t1", x, 0, b"\x00" * 16)],
    )
    _, (labelled,) = await store.label("m", inc, 0, fold=b"", limit=10, items=[("t1", 1)])
    assert (labelled.status, labelled.seq) == ("ok", 1)
    k = store.keys("m")
    slot, dst = start_moving(cluster, [k.trial(inc, "t1")])

    # the outcome of entry 1 names trial t1, whose hash is on the new primary already
    outcome = orjson.dumps({"a": 1, "e": [[1, 0, 1, "t1"]]})
    with pytest.raises(Unavailable, match="TRYAGAIN"):
        await store.sync("m", inc, 1, outcome, 10)
    assert (await store.read("m")).folded == 0  # nothing was folded on the old primary

    cluster.migrate_slot(slot, dst)  # the rest follows; the slot is the new primary's
    assert (await store.sync("m", inc, 1, outcome, 10)).folded == 1
    assert await store.read_outcome("m", inc, "t1") == 1


async def test_a_sweep_waits_for_the_trial_hashes_of_its_grave(
    cluster: RedisCluster, store: ModelStore
) -> None:
    made = await store.create("g", CONFIG, n_classes=2, size=4, most=10_000)
    inc = made.incarnation
    x = encode_instance(Attributes([1], [1.0]))
    ids = [f"t{i}" for i in range(GRAVE_BATCH + 5)]  # too many to delete in one step
    for start in range(0, len(ids), 100):
        await store.predict(
            "g",
            inc,
            0,
            strict=True,
            ttl_ms=60_000,
            fold=b"",
            limit=10,
            most_pending=10_000,
            items=[(t, x, 0, b"\x00" * 16) for t in ids[start : start + 100]],
        )
    k = store.keys("g")
    await store.delete("g")
    grave = k.grave(inc)
    slot, dst = start_moving(cluster, [k.trial(inc, "t0")])
    with pytest.raises(Unavailable, match="TRYAGAIN"):
        await store.sweep()
    cluster.migrate_slot(slot, dst)
    assert await store.sweep() == 0
    with cluster.client(dst) as r:
        assert r.exists(grave, *[k.trial(inc, t) for t in ids]) == 0
