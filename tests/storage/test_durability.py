"""COMMITTEE_ACK against real servers: refusals of servers that could lose acknowledged
writes, and a write that no replica confirmed answered as unavailable, then applied once."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
from harness.redis_cluster import LocalSentinel, RedisCluster

from models.core.instance import Attributes
from storage.client import close, connect
from storage.codec import encode_instance
from storage.errors import StorageError, Unavailable
from storage.repository import LearnGroup, ModelStore, NotDurable, StoredModel
from storage.server import EmbeddedRedis
from storage.topology import parse_topology

pytestmark = pytest.mark.anyio
CONFIG = {"labels": ["a", "b"], "input": {"attributes": {"n_features": 4}}, "label_ttl": 60}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    with tempfile.TemporaryDirectory(prefix="dur-") as d, RedisCluster(Path(d)) as c:
        yield c


@pytest.fixture
async def own(tmp_path: Path) -> AsyncIterator[EmbeddedRedis]:
    with tempfile.TemporaryDirectory(prefix="ack-") as d, EmbeddedRedis(d) as server:
        yield server


async def check(url: str, ack: str) -> None:
    clients = connect(url)
    try:
        await ModelStore(clients, "t", ack=ack).check_server()
    finally:
        await close(clients)


async def test_a_redis_that_may_evict_keys_is_refused(own: EmbeddedRedis) -> None:
    await check(own.url, "applied")
    with redis.Redis.from_url(own.url) as r:
        r.config_set("maxmemory-policy", "volatile-lru")  # trial keys have TTLs
    with pytest.raises(StorageError, match="maxmemory-policy volatile-lru"):
        await check(own.url, "applied")


async def test_fsync_needs_appendfsync_always_before_redis_7_2(own: EmbeddedRedis) -> None:
    with redis.Redis.from_url(own.url) as r:
        version = tuple(int(p) for p in r.info("server")["redis_version"].split(".")[:2])
        if version >= (7, 2):
            pytest.skip("this Redis has WAITAOF")
        with pytest.raises(StorageError, match="appendfsync always"):
            await check(own.url, "fsync")
        r.config_set("appendfsync", "always")
    await check(own.url, "fsync")
    with pytest.raises(StorageError, match="no replica"):
        await check(own.url, "replicated")


async def test_writes_are_refused_until_the_server_passes(own: EmbeddedRedis) -> None:
    with redis.Redis.from_url(own.url) as r:
        r.config_set("maxmemory-policy", "allkeys-lru")
    clients = connect(own.url)
    try:
        store = ModelStore(clients, "t")
        with pytest.raises(StorageError, match="allkeys-lru"):
            await store.create("m", CONFIG, n_classes=2, size=4, most=10)
        assert await store.names() == []  # nothing was written
    finally:
        await close(clients)


def test_cluster_and_sentinel_urls_are_read() -> None:
    t = parse_topology("rediss+cluster://u:p%40w@10.0.0.1:7000,10.0.0.2:7001?ssl_cert_reqs=none")
    assert t.kind == "cluster"
    assert [(a.host, a.port, a.tls, a.verify, a.password) for a in t.nodes] == [
        ("10.0.0.1", 7000, True, False, "p@w"),
        ("10.0.0.2", 7001, True, False, "p@w"),
    ]
    s = parse_topology("redis+sentinel://:secret@s1:26379,s2:26380/main?db=2")
    assert (s.kind, s.master) == ("sentinel", "main")
    assert [(a.host, a.port, a.password) for a in s.nodes] == [("s1", 26379, ""), ("s2", 26380, "")]
    assert s.auth is not None and (s.auth.password, s.auth.db) == ("secret", 2)
    for bad in ("redis+sentinel://s1:26379", "redis+cluster://h:1/3", "redis+cluster://"):
        with pytest.raises(ValueError):
            parse_topology(bad)


async def test_a_write_no_replica_confirmed_is_unavailable_then_applied_once(
    cluster: RedisCluster,
) -> None:
    clients = connect(cluster.seed_url)
    prefix = f"d-{uuid.uuid4().hex[:8]}"
    try:
        # ample time for a replica of a busy machine, but for the one frozen below
        store = ModelStore(clients, prefix, ack="replicated", ack_timeout_ms=10_000)
        hasty = ModelStore(clients, prefix, ack="replicated", ack_timeout_ms=300)
        await store.check_server()
        made = await store.create("m", CONFIG, n_classes=2, size=4, most=10)
        x = encode_instance(Attributes([1], [1.0]))
        items = [("t1", x, 0, b"\x00" * 16)]
        _, res = await store.predict(
            "m",
            made.incarnation,
            0,
            strict=False,
            ttl_ms=60_000,
            fold=b"",
            limit=0,
            most_pending=10,
            items=items,
        )
        assert res is not None and res[0].status == "ok"
        # the replica of the model's primary stops: a label is applied, not confirmed
        replica = cluster.replica_of_key(store.keys("m").meta)
        os.kill(replica, signal.SIGSTOP)
        try:
            with pytest.raises(NotDurable, match="not confirmed"):
                await hasty.label("m", made.incarnation, 0, fold=b"", limit=0, items=[("t1", 1)])
        finally:
            os.kill(replica, signal.SIGCONT)
        # sent again, it is answered as the repeat it is: applied once
        _, again = await store.label("m", made.incarnation, 0, fold=b"", limit=0, items=[("t1", 1)])
        assert again[0].status == "repeat"
        assert (await store.read("m")).version == 1
    finally:
        await close(clients)


async def read_soon(store: ModelStore) -> StoredModel:
    """Model ``m``, read again while the service would answer 503 (at most 5 s)."""
    for _ in range(50):
        try:
            return await store.read("m")
        except Unavailable:
            await asyncio.sleep(0.1)
    return await store.read("m")


async def test_through_sentinel_writes_find_the_new_primary_after_a_failover() -> None:
    with tempfile.TemporaryDirectory(prefix="sen-") as d, LocalSentinel(Path(d)) as sentinel:
        clients = connect(sentinel.url)
        try:
            store = ModelStore(clients, "s", ack="replicated", ack_timeout_ms=5000)
            await store.check_server()
            made = await store.create("m", CONFIG, n_classes=2, size=4, most=10)
            x = encode_instance(Attributes([1], [1.0]))
            group = [LearnGroup([(x, 1)])]
            for seq in range(5):
                await store.learn(
                    "m", made.incarnation, seq, fold=b"", limit=0, keep_ms=1000, groups=group
                )
            old = sentinel.primary_port()
            sentinel.kill(old)
            new = await asyncio.to_thread(sentinel.wait_failover, old)
            assert new == sentinel.replica
            # every acknowledged learn was replicated: the new primary has all five
            # (redis-py's Sentinel client may find no primary once, mid-failover: a 503)
            assert (await read_soon(store)).version == 5
            # the new primary has no replica: nothing can be confirmed replicated now (a
            # store that waits less for a replica says so sooner)
            hasty = ModelStore(clients, "s", ack="replicated", ack_timeout_ms=300)
            with pytest.raises(Unavailable):
                await hasty.learn(
                    "m", made.incarnation, 5, fold=b"", limit=0, keep_ms=1000, groups=group
                )
            # (that write may or may not have been applied: a retry would tell)
            version = (await read_soon(store)).version
            assert version in (5, 6)
            applied = ModelStore(clients, "s")  # COMMITTEE_ACK=applied
            await applied.learn(
                "m", made.incarnation, version, fold=b"", limit=0, keep_ms=1000, groups=group
            )
            assert (await read_soon(applied)).version == version + 1
        finally:
            await close(clients)
