"""The repository and its Lua scripts against a real Redis."""

from __future__ import annotations

import asyncio
import hashlib
import re
from typing import Any

import numpy as np
import orjson
import pytest
from redis.asyncio.cluster import RedisCluster

from models.core.instance import Attributes, Experts
from storage.client import close, connect
from storage.codec import decode_entry, decode_instance, encode_instance, entry_stamp
from storage.errors import Conflict, CorruptData, ModelNotFound
from storage.repository import Idempotency, LearnGroup, LogGap, ModelStore, Saved, Sync
from storage.scripts import Script

pytestmark = pytest.mark.anyio
CONFIG = {"labels": ["a", "b"], "input": {"attributes": {"n_features": 4}}}


def x_bytes(i: int) -> bytes:
    return encode_instance(Attributes([i % 4], [1.0]))


async def create(store: ModelStore, name: str = "m", **kw: Any) -> str:
    made = await store.create(name, CONFIG, n_classes=2, size=4, most=kw.pop("most", 100), **kw)
    return made.incarnation


async def learn(
    store: ModelStore,
    name: str,
    inc: str,
    known: int,
    *,
    items: list[tuple[bytes, int]],
    fold: bytes = b"",
    limit: int = 10,
    idem: Idempotency | None = None,
) -> tuple[Sync, int]:
    sync, res = await store.learn(
        name, inc, known, fold=fold, limit=limit, keep_ms=60_000, groups=[LearnGroup(items, idem)]
    )
    return sync, res[0].first


def replace_script(store: ModelStore, name: str, text: str) -> None:
    """Make ``store`` run ``text`` in place of its script ``name``."""
    store.calls.scripts[name] = Script(name, (), text, hashlib.sha1(text.encode()).hexdigest())


def entries(sync: Sync) -> list[tuple[bytes, list[bytes]]]:
    """A reply's entries in the form :meth:`ModelStore.read_log` gives them."""
    return [(entry_id, list(fields)) for entry_id, fields in sync.entries]


def fold(first: int, outcomes: list[tuple[int, int, int, str]]) -> bytes:
    return orjson.dumps({"a": first, "e": outcomes})


async def test_create_conflict_delete(store: ModelStore) -> None:
    inc = await create(store)
    with pytest.raises(Conflict):
        await create(store)
    assert await store.names() == ["m"]
    assert (await store.read("m")).incarnation == inc
    await store.delete("m")
    with pytest.raises(ModelNotFound):
        await store.read("m")
    with pytest.raises(ModelNotFound):
        await store.delete("m")
    assert await store.names() == []


async def test_old_incarnation_is_gone(store: ModelStore) -> None:
    old = await create(store)
    await store.delete("m")
    await create(store)
    with pytest.raises(ModelNotFound):
        await learn(store, "m", old, 0, fold=b"", limit=10, items=[(x_bytes(0), 1)])
    assert (await store.read("m")).version == 0


async def test_learn_appends_in_order_and_returns_catch_up(store: ModelStore) -> None:
    inc = await create(store)
    sync, first = await learn(
        store, "m", inc, 0, fold=b"", limit=10, items=[(x_bytes(i), i % 2) for i in range(3)]
    )
    assert (first, sync.version, sync.entries) == (1, 3, [])  # the caller has its own
    entries = [decode_entry(i, f, 4, 2) for i, f in await store.read_log("m", 0, 10)]
    assert [(e.seq, e.kind, e.y) for e in entries] == [
        (1, "learn", 0),
        (2, "learn", 1),
        (3, "learn", 0),
    ]
    # a worker that knew only entry 1 gets the others' entries 2 and 3, not its own 4
    sync, first = await learn(store, "m", inc, 1, fold=b"", limit=10, items=[(x_bytes(9), 1)])
    assert first == 4 and sync.version == 4
    assert [e[0] for e in sync.entries] == [b"2-0", b"3-0"]
    sync, _ = await learn(store, "m", inc, 0, fold=b"", limit=2, items=[(x_bytes(9), 1)])
    assert [e[0] for e in sync.entries] == [b"1-0", b"2-0"]  # the limit holds
    assert [e[0] for e in await store.read_log("m", 1, 10, upto=3)] == [b"2-0", b"3-0"]


async def test_fold_counts_each_outcome_once(store: ModelStore) -> None:
    inc = await create(store)
    await learn(store, "m", inc, 0, fold=b"", limit=0, items=[(x_bytes(i), 0) for i in range(4)])
    outcomes = [(0, 1, 1, ""), (0, 0, 0, ""), (0, 1, 1, ""), (0, 0, 1, "")]
    # out of order, overlapping and repeated reports: still each entry once
    await store.sync("m", inc, 4, fold(2, outcomes[1:2]), 0)  # gap: entry 1 unknown, ignored
    assert (await store.read("m")).folded == 0
    await store.sync("m", inc, 4, fold(1, outcomes[:2]), 0)
    await store.sync("m", inc, 4, fold(1, outcomes[:3]), 0)
    sync = await store.sync("m", inc, 4, fold(2, outcomes[1:]), 0)
    await store.sync("m", inc, 4, fold(1, [*outcomes, (0, 1, 1, "")]), 0)  # beyond the log
    m = await store.read("m")
    assert sync.folded == m.folded == 4
    assert m.counters["mistakes"] == 2 and m.counters["updates"] == 3
    assert m.confusion == {(0, 1): 2, (0, 0): 2}


async def test_a_sync_says_when_the_outcomes_it_sent_were_ignored(store: ModelStore) -> None:
    """Outcomes reported after a gap are ignored, and the reply says so; those that
    fold, all or in part, and a call that sends none, are not reported ignored."""
    inc = await create(store)
    await learn(store, "m", inc, 0, fold=b"", limit=0, items=[(x_bytes(i), 0) for i in range(4)])
    o = (0, 1, 1, "")
    assert (await store.sync("m", inc, 4, fold(3, [o, o]), 0)).fold_ignored
    assert not (await store.sync("m", inc, 4, b"", 0)).fold_ignored
    assert not (await store.sync("m", inc, 4, fold(1, [o]), 0)).fold_ignored
    assert (await store.sync("m", inc, 4, fold(3, [o]), 0)).fold_ignored
    sync = await store.sync("m", inc, 4, fold(1, [o, o, o]), 0)  # 1 again, 2 and 3 new
    assert sync.folded == 3 and not sync.fold_ignored
    sync, _ = await learn(store, "m", inc, 4, fold=fold(5, [o]), limit=0, items=[(x_bytes(9), 1)])
    assert sync.fold_ignored and sync.folded == 3
    # a snapshot's reply says so too, kept or not
    got = await store.save_snapshot("m", inc, 5, b"{}", fold(5, [o]), 10)
    assert got == Saved(kept=False, folded=3, fold_ignored=True)
    got = await store.save_snapshot("m", inc, 5, b"{}", fold(4, [o, o]), 10)
    assert got == Saved(kept=True, folded=5, fold_ignored=False)
    got = await store.save_snapshot("m", inc, 3, b"{}", fold(3, [o]), 10)
    assert got == Saved(kept=True, folded=5, fold_ignored=False)  # folded already


async def test_mistake_curve_is_down_sampled(store: ModelStore) -> None:
    inc = await create(store)
    n = 1300
    await learn(store, "m", inc, 0, fold=b"", limit=0, items=[(x_bytes(i), 0) for i in range(n)])
    rng = np.random.default_rng(0)
    p = (rng.random(n) < 0.3).astype(int)
    for a in range(0, n, 100):
        await store.sync("m", inc, n, fold(a + 1, [(0, int(v), 0, "") for v in p[a : a + 100]]), 0)
    raw = await store.client.lrange(store.keys("m").curve, 0, -1)
    points = [tuple(map(int, pt.split(b":"))) for pt in raw]
    step = points[1][0] - points[0][0]
    assert len(points) <= 512 and step == 4
    assert [t for t, _ in points] == list(range(step, n + 1, step))
    assert all(m == int(p[:t].sum()) for t, m in points)


async def test_statistics_read_the_curve_as_stored_and_the_window_from_its_ends(
    store: ModelStore,
) -> None:
    inc = await create(store)
    n = 1500
    await learn(store, "m", inc, 0, fold=b"", limit=0, items=[(x_bytes(i), 0) for i in range(n)])
    p = (np.random.default_rng(1).random(n) < 0.4).astype(int)
    for a in range(0, 35, 5):  # part of the window: it starts at trial 0
        await store.sync("m", inc, n, fold(a + 1, [(0, int(v), 0, "") for v in p[a : a + 5]]), 0)
        s = await store.read_statistics("m", 0)
        assert s.curve == [(t, int(p[:t].sum())) for t in range(1, a + 6)]
        assert s.window == ((a + 5) // 10 * 10, int(p[: (a + 5) // 10 * 10].sum()))
    for a in range(35, n, 100):  # the curve read again after each change: never a stale one
        end = min(n, a + 100)
        await store.sync("m", inc, n, fold(a + 1, [(0, int(v), 0, "") for v in p[a:end]]), 0)
        s = await store.read_statistics("m", 0)
        step = s.curve[1][0] - s.curve[0][0]
        assert s.curve == [(t, int(p[:t].sum())) for t in range(step, end + 1, step)]
        last = end // 10 * 10
        first = max(0, last - 1000)
        assert s.window == (last - first, int(p[first:last].sum()))


async def test_statistics_polled_again_are_the_same_until_anything_changes(
    store: ModelStore,
) -> None:
    inc = await create(store)
    await learn(store, "m", inc, 0, fold=b"", limit=0, items=[(x_bytes(i), 0) for i in range(20)])
    await store.sync("m", inc, 20, fold(1, [(0, 1, 0, "")] * 20), 0)
    first = await store.read_statistics("m", 0)
    assert await store.read_statistics("m", 0) is first  # kept while Redis answers the same
    assert first.model.counters["mistakes"] == 20
    await store.client.hincrby(store.keys("m").meta, "mistakes", 1)
    changed = await store.read_statistics("m", 0)
    assert changed is not first and changed.model.counters["mistakes"] == 21
    await store.client.hset(store.keys("m").meta, "mistakes", b"x")
    with pytest.raises(CorruptData, match="mistakes"):
        await store.read_statistics("m", 0)


async def net_out(store: ModelStore) -> int:
    """What Redis has sent its clients so far, in bytes."""
    if isinstance(store.client, RedisCluster):  # every node: the model's keys are on one
        got: Any = await store.client.info("stats", target_nodes=RedisCluster.ALL_NODES)
        return sum(int(v["total_net_output_bytes"]) for v in got.values())
    return int((await store.client.info("stats"))["total_net_output_bytes"])


async def test_a_curve_is_sent_again_only_once_it_moved(store: ModelStore, redis_url: str) -> None:
    inc = await create(store)
    n = 511  # a point each: two more and the curve is thinned
    await learn(store, "m", inc, 0, fold=b"", limit=0, items=[(x_bytes(i), 0) for i in range(n)])
    await store.sync("m", inc, n, fold(1, [(0, 1, 0, "")] * n), 0)
    sizes = []
    for _ in range(2):
        before = await net_out(store)
        s = await store.read_statistics("m", 0)
        sizes.append(await net_out(store) - before)
        assert s.curve == [(t, t) for t in range(1, n + 1)]
    # the points (511 of them: over 6 KB as Redis writes them) went once
    assert sizes[0] - sizes[1] > 5_000, sizes
    await learn(store, "m", inc, n, items=[(x_bytes(0), 0)] * 2)
    await store.sync("m", inc, n + 2, fold(n + 1, [(0, 0, 0, "")] * 2), 0)
    s = await store.read_statistics("m", 0)
    assert s.curve == [(t, t) for t in range(2, n, 2)] + [(n + 1, n)]  # every other point
    # a worker that holds no curve is sent it whole
    clients = connect(redis_url)
    try:
        other = await ModelStore(clients, store.prefix).read_statistics("m", 0)
    finally:
        await close(clients)
    assert other.curve == s.curve


async def test_a_curve_that_grew_is_sent_from_where_the_reader_left_it(
    store: ModelStore, redis_url: str
) -> None:
    """Points added at the same step after a read: only those are sent, and the curve
    read is the whole stored one. A curve whose points the reader holds no longer begin
    it (its last one changed) is sent whole."""
    inc = await create(store)
    n = 400
    await learn(store, "m", inc, 0, fold=b"", limit=0, items=[(x_bytes(i), 0) for i in range(n)])
    await store.sync("m", inc, n, fold(1, [(0, 1, 0, "")] * 300), 0)
    assert (await store.read_statistics("m", 0)).curve == [(t, t) for t in range(1, 301)]
    stored = store.keys("m").curve
    for a, b in ((300, 302), (302, 340)):
        await store.sync("m", inc, n, fold(a + 1, [(0, 1, 0, "")] * (b - a)), 0)
        sent = []
        clients = connect(redis_url)
        try:  # this store's reader, which holds the curve, then one that holds none
            for reader in (store, ModelStore(clients, store.prefix)):
                before = await net_out(store)
                s = await reader.read_statistics("m", 0)
                sent.append(await net_out(store) - before)
                assert s.curve == [(t, t) for t in range(1, b + 1)]
        finally:
            await close(clients)
        assert sent[0] + 3_000 < sent[1], sent  # 300 points and more: over 3 KB
    raw = await store.client.lrange(stored, 0, -1)
    assert [tuple(map(int, p.split(b":"))) for p in raw] == s.curve
    await store.client.lset(stored, 339, b"340:1")  # the reader's last point
    await store.client.rpush(stored, b"341:2")
    s = await store.read_statistics("m", 0)
    assert s.curve == [(t, t) for t in range(1, 340)] + [(340, 1), (341, 2)]


async def test_a_model_made_again_is_not_shown_the_curve_of_the_one_before(
    store: ModelStore,
) -> None:
    """Two incarnations whose curves have the same step, length and last point: the second
    is read whole, not taken for the first."""
    shown = []
    for mistakes in ([1, 1, 0, 0], [0, 0, 1, 1]):
        inc = await create(store)
        items = [(x_bytes(i), 0) for i in range(4)]
        await learn(store, "m", inc, 0, fold=b"", limit=0, items=items)
        await store.sync("m", inc, 4, fold(1, [(0, p, 0, "") for p in mistakes]), 0)
        shown.append((await store.read_statistics("m", 0)).curve)
        await store.delete("m")
    assert shown == [[(1, 1), (2, 2), (3, 2), (4, 2)], [(1, 0), (2, 0), (3, 1), (4, 2)]]


@pytest.mark.parametrize(
    ("key", "point", "words"),
    [
        ("curve", b"7:x", "curve"),
        ("curve", b"07:1", "curve"),
        ("curve", b"7:1:2", "curve"),
        ("curve", b"-7:1", "curve"),
        ("window", b"10", "window"),
        ("window", b"010:1", "window"),
    ],
)
async def test_a_corrupt_point_is_refused_not_shown(
    store: ModelStore, key: str, point: bytes, words: str
) -> None:
    inc = await create(store)
    await learn(store, "m", inc, 0, fold=b"", limit=0, items=[(x_bytes(i), 0) for i in range(20)])
    await store.sync("m", inc, 20, fold(1, [(0, 1, 0, "")] * 20), 0)
    await store.read_statistics("m", 0)  # a good curve read (and kept) first
    await store.client.rpush(getattr(store.keys("m"), key), point)
    with pytest.raises(CorruptData, match=words):
        await store.read_statistics("m", 0)


async def test_predict_strict_label_repeat_conflict_expired(store: ModelStore) -> None:
    inc = await create(store)
    await learn(store, "m", inc, 0, fold=b"", limit=0, items=[(x_bytes(0), 0)])
    item = ("t1", x_bytes(1), 1, b"\x00" * 16)
    sync, res = await store.predict(
        "m", inc, 0, strict=True, most_pending=100, ttl_ms=60_000, fold=b"", limit=10, items=[item]
    )
    assert res is None and sync.version == 1 and len(sync.entries) == 1  # stale: retry
    sync, res = await store.predict(
        "m", inc, 1, strict=True, most_pending=100, ttl_ms=60_000, fold=b"", limit=10, items=[item]
    )
    assert res is not None and res[0].status == "ok"
    _, res = await store.predict(
        "m", inc, 1, strict=True, most_pending=100, ttl_ms=60_000, fold=b"", limit=10, items=[item]
    )
    assert res is not None and (res[0].status, res[0].predicted, res[0].version) == (
        "existing",
        1,
        1,
    )
    sync, lab = await store.label("m", inc, 1, fold=b"", limit=10, items=[("t1", 0), ("t1", 0)])
    assert [r.status for r in lab] == ["ok", "repeat"] and lab[0].seq == 2 == sync.version
    (logged,) = await store.read_log("m", 1, 10)
    e = decode_entry(*logged, 4, 2)
    assert (e.kind, e.trial_id, e.predicted, e.y) == ("label", "t1", 1, 0)
    fields = logged[1]
    assert lab[0].instance == x_bytes(1) == fields[fields.index(b"x") + 1]
    _, lab = await store.label("m", inc, 2, fold=b"", limit=10, items=[("t1", 1), ("zz", 1)])
    assert [r.status for r in lab] == ["conflict", "unknown"] and lab[0].label == 0
    # the trial keeps only what a retried label needs: no instance, no scores
    kept = await store.client.get(store.keys("m").trial(inc, "t1"))
    assert re.fullmatch(rb"1:1:\d+:0:2::0:", kept)
    assert await store.client.pttl(store.keys("m").trial(inc, "t1")) > 0
    await store.sync("m", inc, 2, fold(1, [(0, 0, 1, ""), (0, 1, 1, "t1")]), 0)
    _, lab = await store.label("m", inc, 2, fold=b"", limit=10, items=[("t1", 0)])
    assert (lab[0].status, lab[0].updated) == ("repeat", 1)
    short = ("t2", x_bytes(2), 0, b"\x00" * 16)
    await store.predict(
        "m", inc, 2, strict=True, most_pending=100, ttl_ms=1, fold=b"", limit=10, items=[short]
    )
    await asyncio.sleep(0.01)
    _, lab = await store.label("m", inc, 2, fold=b"", limit=10, items=[("t2", 0)])
    m = await store.read("m")
    assert lab[0].status == "expired" and m.version == 2
    assert m.counters["expired"] == 1 and m.counters["late_labels"] == 1
    assert m.counters["predictions"] == 2 and m.counters["labelled"] == 1


async def test_snapshot_trims_the_log_and_old_readers_reload(store: ModelStore) -> None:
    inc = await create(store)
    await learn(store, "m", inc, 0, fold=b"", limit=0, items=[(x_bytes(i), 0) for i in range(10)])
    got = await store.save_snapshot("m", inc, 6, b"{}", b"", 2)
    assert got == Saved(kept=False, folded=0, fold_ignored=False)  # not folded yet
    done = fold(1, [(0, 0, 0, "")] * 6)
    got = await store.save_snapshot("m", inc, 6, b'{"s": 6}', done, 2)
    assert got == Saved(kept=True, folded=6, fold_ignored=False)
    assert await store.read_snapshot("m") == (6, b'{"s": 6}', "", None)
    # the snapshot's own entry stays: a worker there can still show its stamp
    kept = [b"6-0", b"7-0", b"8-0", b"9-0", b"10-0"]
    assert [e[0] for e in await store.read_log("m", 0, 100)] == kept
    assert (await store.save_snapshot("m", inc, 5, b"older", b"", 2)).kept
    assert await store.read_snapshot("m") == (6, b'{"s": 6}', "", None)  # the newer one stays
    with pytest.raises(LogGap):
        await store.sync("m", inc, 3, b"", 10)
    sync = await store.sync("m", inc, 6, b"", 10)
    assert [e[0] for e in sync.entries] == kept[1:]


async def stamped_learn(store: ModelStore, inc: str, known: int, seen: str, n: int) -> Sync:
    sync, results = await store.learn(
        "m",
        inc,
        known,
        fold=b"",
        limit=0,
        keep_ms=60_000,
        groups=[LearnGroup([(x_bytes(i), i % 2) for i in range(n)])],
        seen=seen,
    )
    assert [r.status for r in results] == ["ok"]
    return sync


async def lose_after(store: ModelStore, version: int) -> None:
    """What a failover to a replica that lagged does to a model: its log and version
    go back to ``version`` (its meta otherwise as it was)."""
    k = store.keys("m")
    kept = await store.client.xrange(k.log, "-", f"{version}-0")
    await store.client.delete(k.log)  # (XDEL would leave the stream's last id behind)
    for entry_id, fields in kept:
        await store.client.xadd(k.log, fields, id=entry_id)
    await store.client.hset(k.meta, mapping={"version": version, "folded": version})


async def test_each_write_stamps_its_entries_and_a_worker_shows_the_stamp_it_applied(
    store: ModelStore,
) -> None:
    inc = await create(store)
    first = await stamped_learn(store, inc, 0, "", 3)
    entries = await store.read_log("m", 0, 10)
    assert [entry_stamp(f) for _, f in entries] == [first.stamp] * 3
    second = await stamped_learn(store, inc, 3, first.stamp, 2)
    assert second.stamp not in ("", first.stamp)
    assert (await store.sync("m", inc, 5, b"", 10, seen=second.stamp)).version == 5
    # behind, with the stamp of the entry it stands at: its catch-up comes back
    sync = await store.sync("m", inc, 3, b"", 10, seen=first.stamp)
    assert [e[0] for e in sync.entries] == [b"4-0", b"5-0"]
    with pytest.raises(LogGap):  # a stamp that is not the log's at that version
        await store.sync("m", inc, 3, b"", 10, seen=second.stamp)
    # a snapshot keeps the stamp of its entry, and a worker loading it starts from there
    saved = await store.save_snapshot(
        "m", inc, 5, b"{}", fold(1, [(0, 0, 0, "")] * 5), 10, seen=second.stamp
    )
    assert saved.kept
    assert await store.read_snapshot("m") == (5, b"{}", second.stamp, None)


async def test_a_worker_that_applied_entries_a_failover_lost_is_told_to_reload(
    store: ModelStore,
) -> None:
    inc = await create(store)
    kept = await stamped_learn(store, inc, 0, "", 3)
    lost = await stamped_learn(store, inc, 3, kept.stamp, 2)  # a worker applied 4 and 5
    await lose_after(store, 3)
    # shorter than what it applied: found out as before
    with pytest.raises(LogGap):
        await store.sync("m", inc, 5, b"", 10, seen=lost.stamp)
    # others take the places of the lost entries: the same version, other entries
    regrown = await stamped_learn(store, inc, 3, kept.stamp, 2)
    assert (await store.read("m")).version == 5
    outcomes = fold(4, [(0, 1, 1, ""), (1, 0, 1, "")])  # what the diverged worker learned
    calls: list[Any] = [
        lambda: store.sync("m", inc, 5, outcomes, 10, seen=lost.stamp),
        lambda: stamped_learn(store, inc, 5, lost.stamp, 1),
        lambda: store.label(
            "m", inc, 5, fold=outcomes, limit=10, items=[("t", 0)], seen=lost.stamp
        ),
        lambda: store.predict(
            "m",
            inc,
            5,
            strict=False,
            ttl_ms=1000,
            fold=outcomes,
            limit=10,
            most_pending=10,
            items=[("t", x_bytes(1), 0, b"\x00" * 16)],
            seen=lost.stamp,
        ),
        lambda: store.import_state("m", inc, 5, b"{}", outcomes, 10, seen=lost.stamp),
        lambda: store.save_snapshot("m", inc, 5, b"diverged", outcomes, 10, seen=lost.stamp),
    ]
    for call in calls:
        with pytest.raises(LogGap):
            await call()
    # none of them wrote anything: no entry, no folded outcome, no pending trial, no state
    m = await store.read("m")
    assert (m.version, m.folded, m.counters["mistakes"], m.counters["predictions"]) == (5, 3, 0, 0)
    assert await store.read_snapshot("m") is None
    # the worker that wrote the new entries goes on
    assert (await store.sync("m", inc, 5, outcomes, 10, seen=regrown.stamp)).folded == 5
    # a caller that shows no stamp is not checked (entries written before stamps were kept)
    assert (await store.sync("m", inc, 5, b"", 10)).version == 5


async def test_what_comes_back_is_validated(store: ModelStore) -> None:
    inc = await create(store)
    await store.client.xadd(store.keys("m").log, {"k": "n", "x": b"Zjunk", "y": "0"}, id="1-0")
    await store.client.hset(store.keys("m").meta, "version", 1)
    sync = await store.sync("m", inc, 0, b"", 10)
    with pytest.raises(CorruptData, match="tag"):
        decode_entry(*sync.entries[0], 4, 2)
    await store.client.hset(store.keys("m").meta, "config", b"[1, 2")
    with pytest.raises(CorruptData, match="config"):
        await store.read("m")
    await store.client.hset(store.keys("m").meta, "version", b"-3")
    with pytest.raises(CorruptData):
        await store.read("m")


@pytest.mark.parametrize(
    ("x", "size", "k"),
    [
        (Attributes([0, 3], [1.5, -2.0]), 4, 2),
        (Experts([0, 0, 2], [0, 1, 1], [1.0, 0.5, 2.0]), 3, 2),
        (Attributes([], []), 1, 2),
    ],
)
def test_instances_round_trip(x: Any, size: int, k: int) -> None:
    y = decode_instance(encode_instance(x), size, k)
    assert type(y) is type(x)
    for a, b in zip(vars_of(x), vars_of(y), strict=True):
        assert np.array_equal(a, b)


def vars_of(x: Any) -> list[np.ndarray]:
    if isinstance(x, Attributes):
        return [x.indices, x.values]
    return [x.expert, x.cls, x.value]


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "expected"),
        (b"Q" + b"\x00" * 12, "tag"),
        (b"A" + b"\x00" * 13, "12 per entry"),
        (b"E" + b"\x00" * 15, "16 per entry"),
        (b"A" + np.int32(9).tobytes() + np.float64(1).tobytes(), "beyond"),
        (b"A" + np.int32(-1).tobytes() + np.float64(1).tobytes(), "stored instance"),
        (b"A" + np.int32(1).tobytes() + np.float64(np.nan).tobytes(), "finite"),
        (
            b"E" + np.int32(0).tobytes() + np.int32(5).tobytes() + np.float64(1).tobytes(),
            "class",
        ),
    ],
)
def test_bad_instances_are_corrupt(data: bytes, words: str) -> None:
    with pytest.raises(CorruptData, match=words):
        decode_instance(data, 4, 2)


async def test_a_change_is_an_entry_checked_against_the_input_it_was_made_for(
    store: ModelStore,
) -> None:
    inc = await create(store)
    await learn(store, "m", inc, 0, items=[(x_bytes(i), 0) for i in range(3)])
    wider = orjson.dumps({"labels": [0, 1, 2], "attributes": {"n_features": 4}})
    # made against the input as created, behind the log: trials since leave it valid
    sync, seq = await store.change("m", inc, 1, b'{"labels": {"add": [2]}}', wider, (3, 4), b"", 10)
    assert sync is None and seq == 4
    log = await store.read_log("m", 3, 10)
    assert log[0][0] == b"4-0" and log[0][1][:4] == [b"k", b"c", b"c", b'{"labels": {"add": [2]}}']
    m = await store.read("m")
    assert m.space == orjson.loads(wider) and m.current["labels"] == [0, 1, 2]
    assert m.config["labels"] == CONFIG["labels"]  # as created, for a replay from the start
    # the next change must be made against the input after this one
    stale, seq = await store.change("m", inc, 4, b'{"x": 1}', b"{}", (3, 4), b"", 10)
    assert stale is not None and seq == -1
    assert (await store.read("m")).version == 4
    # class 2 is the model's now: a trial may name it
    await learn(store, "m", inc, 4, items=[(x_bytes(0), 2)])
    # folded, the change counts as no trial
    done = fold(1, [(0, 0, 1, "")] * 3 + [(0, 0, 4, ""), (2, 1, 1, "")])
    await store.sync("m", inc, 5, done, 10)
    m = await store.read("m")
    assert m.folded == 5 and m.counters["mistakes"] == 1 and m.counters["updates"] == 4
    # a snapshot keeps the input its state was learned with
    assert (await store.save_snapshot("m", inc, 5, b"{}", b"", 2, space=wider)).kept
    assert (await store.read_snapshot("m")).space == orjson.loads(wider)  # type: ignore[union-attr]


def test_a_label_entry_names_the_version_that_served_it_when_it_can() -> None:
    x = x_bytes(1)
    base = [b"k", b"l", b"t", b"t1", b"x", x, b"y", b"1", b"p", b"0"]
    at = [decode_entry(b"7-0", [*base, b"v", v, b"w", b"1"], 4, 2).served_at for v in (b"3", b"6")]
    assert at == [3, 6]
    # unknown, never a fault of the entry: none (older entries), a version the label
    # cannot come after, a value the service does not write
    for fields in (base, *([*base, b"v", v] for v in (b"", b"7", b"99", b"-1", b"x" * 40))):
        e = decode_entry(b"7-0", fields, 4, 2)
        assert (e.kind, e.predicted, e.served_at) == ("label", 0, -1)


def test_a_log_entry_is_read_only_with_its_numbers_well_made() -> None:
    x = x_bytes(1)
    base = [b"k", b"l", b"t", b"t1", b"x", x]

    def read(entry_id: bytes, y: bytes = b"1", p: bytes = b"0") -> tuple[int, int, int | None]:
        e = decode_entry(entry_id, [*base, b"y", y, b"p", p], 4, 2)
        return e.seq, e.y, e.predicted

    assert read(b"12-0") == (12, 1, 0)
    assert read(b"0012-0", b"01", b"00") == (12, 1, 0)  # digits are digits
    assert read(b"%d-0" % 2**70) == (2**70, 1, 0)
    for entry_id in (b"0-0", b"12-1", b"12-0-0", b"-0", b"x-0", b"12", b"\xd9\xa1-0"):
        with pytest.raises(CorruptData, match="log entry id"):
            read(entry_id)
    for bad in (b"2", b"-1", b"", b"1.0", b" 1", b"9" * 19, "\u0661".encode()):
        with pytest.raises(CorruptData, match="log entry 12 label"):
            read(b"12-0", y=bad)
        with pytest.raises(CorruptData, match="log entry 12 prediction"):
            read(b"12-0", p=bad)


async def test_a_label_is_logged_with_the_version_its_prediction_was_served_at(
    store: ModelStore,
) -> None:
    inc = await create(store)
    await learn(store, "m", inc, 0, fold=b"", limit=0, items=[(x_bytes(i), 0) for i in range(3)])
    items = [("t1", x_bytes(1), 1, b"\x00" * 16)]
    _, res = await store.predict(
        "m", inc, 2, strict=False, ttl_ms=60_000, fold=b"", limit=0, most_pending=10, items=items
    )  # served by a worker at version 2 of 3
    assert res is not None and res[0].status == "ok"
    _, got = await store.label("m", inc, 3, fold=b"", limit=0, items=[("t1", 0)])
    assert got[0].status == "ok" and got[0].seq == 4
    (entry,) = [decode_entry(i, f, 4, 2) for i, f in await store.read_log("m", 3, 10)]
    assert (entry.kind, entry.predicted, entry.served_at) == ("label", 1, 2)


async def test_a_label_call_gives_back_the_entries_before_its_own_and_what_it_applied(
    store: ModelStore,
) -> None:
    """The entries a label call gives back stop before the first label it applied, as
    a learn call's do; its results hold what the caller replays those from: each
    applied label's log entry, its instance as the entry keeps it and the prediction
    served."""
    inc = await create(store)
    ids = [f"t{i}" for i in range(6)]
    items = [(t, x_bytes(i), i % 2, b"\x00" * 16) for i, t in enumerate(ids)]
    await store.predict(
        "m", inc, 0, strict=True, ttl_ms=60_000, fold=b"", limit=0, most_pending=10, items=items
    )
    # another worker's trials come first: the reply brings them, then the labels' results
    await learn(store, "m", inc, 0, limit=0, items=[(x_bytes(1), 1), (x_bytes(2), 0)])
    sync, got = await store.label("m", inc, 0, fold=b"", limit=10, items=[(t, 1) for t in ids[:3]])
    assert [r.seq for r in got] == [3, 4, 5] and sync.version == 5
    assert entries(sync) == await store.read_log("m", 0, 10, 2)
    logged = [decode_entry(*e, 4, 2) for e in await store.read_log("m", 2, 10)]
    assert [(e.seq, e.trial_id, e.y) for e in logged] == [(3, "t0", 1), (4, "t1", 1), (5, "t2", 1)]
    assert [r.instance for r in got] == [x_bytes(0), x_bytes(1), x_bytes(2)]
    assert [r.predicted for r in got] == [e.predicted for e in logged] == [0, 1, 0]
    # a repeated, an unknown and an applied label: none before it, nothing of the others
    sync, got = await store.label(
        "m", inc, 5, fold=b"", limit=10, items=[("t0", 1), ("zz", 1), ("t3", 0)]
    )
    assert [r.status for r in got] == ["repeat", "unknown", "ok"]
    assert sync.entries == [] and got[2].seq == 6 == sync.version
    assert [r.instance for r in got] == [b"", b"", x_bytes(3)]
    # the others' entries cut short by the limit: the caller reads the rest of the log
    await learn(store, "m", inc, 6, limit=0, items=[(x_bytes(3), 1)] * 3)
    sync, got = await store.label("m", inc, 6, fold=b"", limit=2, items=[("t4", 1)])
    assert got[0].seq == 10 == sync.version
    assert entries(sync) == await store.read_log("m", 6, 2) and len(sync.entries) == 2


async def test_labels_applied_out_of_the_logs_order_are_refused(store: ModelStore) -> None:
    """The labels a call applied are the log's last entries, in order: a reply that says
    otherwise is not the script's, and is refused rather than replayed."""
    inc = await create(store)
    text = "return {'ok', '7', '0', {}, {{'ok', '0', '3', 'x', ''}, {'ok', '1', '5', 'x', ''}}}"
    replace_script(store, "LABEL", text)
    with pytest.raises(CorruptData, match="labels applied as log entries"):
        await store.label("m", inc, 0, fold=b"", limit=10, items=[("t0", 1), ("t1", 0)])


@pytest.mark.parametrize("result", ["{'ok', '0', '1'}", "{'ok', '0', '1', 5, ''}"])
async def test_a_label_reply_without_its_entrys_fields_is_refused(
    store: ModelStore, result: str
) -> None:
    inc = await create(store)
    text = f"return {{'ok', '1', '0', {{}}, {{{result}}}}}"  # a script that lost them
    replace_script(store, "LABEL", text)
    with pytest.raises(CorruptData, match=r"label of 't1'|not its results"):
        await store.label("m", inc, 0, fold=b"", limit=10, items=[("t1", 1)])


# replies a trial script does not write: a status it has not, a result cut short or
# missing, results without the entries before them
_BROKEN_REPLIES = [
    ("PREDICT", "{'ok', '1', '0', {}, {{'maybe'}}}"),
    ("PREDICT", "{'ok', '1', '0', {}, {{'existing', '1'}}}"),
    ("PREDICT", "{'ok', '1', '0', {}, {{'existing', '1', 7, '1'}}}"),
    ("PREDICT", "{'ok', '1', '0', {}, {}}"),
    ("LABEL", "{'ok', '1', '0', {}, {{'repeat', '0'}}}"),
    ("LABEL", "{'ok', '1', '0', {}, {{'unknown'}, {'unknown'}}}"),
    ("LABEL", "{'ok', '1', '0', {}, {{{'ok'}}}}"),
    ("LEARN", "{'ok', '1', '0', {}, {{'ok'}}}"),
    ("LEARN", "{'ok', '1', '0', {}, 3}"),
    ("LEARN", "{'ok', '1', '0'}"),
]


@pytest.mark.parametrize(("script", "reply"), _BROKEN_REPLIES)
async def test_a_trial_reply_not_of_its_scripts_shape_is_refused(
    store: ModelStore, script: str, reply: str
) -> None:
    inc = await create(store)
    text = f"return {reply}"
    replace_script(store, script, text)
    with pytest.raises(CorruptData, match=r"model 'm'|a script replied"):
        if script == "PREDICT":
            await store.predict(
                "m",
                inc,
                0,
                strict=True,
                ttl_ms=60_000,
                fold=b"",
                limit=10,
                most_pending=10,
                items=[("t1", x_bytes(1), 1, b"\x00" * 16)],
            )
        elif script == "LABEL":
            await store.label("m", inc, 0, fold=b"", limit=10, items=[("t1", 1)])
        else:
            await learn(store, "m", inc, 0, items=[(x_bytes(1), 1)])


async def test_a_large_batch_is_pending_and_labelled_whole(store: ModelStore) -> None:
    """Thousands of trials in one call, beyond the most pending: every one stored is
    pending with its own deadlines, the rest refused as full, and one label call applies
    them all, in order, leaving none pending."""
    inc = await create(store)
    n, most = 2_600, 2_450
    items = [(f"t{i}", x_bytes(i), i % 2, b"\x00" * 16) for i in range(n)]
    items[7] = items[3]  # the same trial twice: the second finds it pending
    items[9] = ("t3", x_bytes(1), 1, b"\x00" * 16)  # the same id, another instance
    _, res = await store.predict(
        "m", inc, 0, strict=True, most_pending=most, ttl_ms=60_000, fold=b"", limit=0, items=items
    )
    assert res is not None
    statuses = [r.status for r in res]
    assert statuses[7] == "existing" and statuses[9] == "conflict"
    assert statuses.count("ok") == most and statuses[-(n - most - 2) :] == ["full"] * 148
    ok = [t for (t, *_), s in zip(items, statuses, strict=True) if s == "ok"]
    k = store.keys("m")
    # one key per trial, indexed by its deadline while pending; nothing else written
    pending = dict(await store.client.zrange(k.trials, 0, -1, withscores=True))
    assert sorted(pending) == sorted(t.encode() for t in ok)
    assert not await store.client.exists(k.pending)
    for t in ok[:: len(ok) // 50]:
        raw = await store.client.get(k.trial(inc, t))
        d = int(raw.split(b":")[2])
        assert pending[t.encode()] == d
        assert await store.client.pexpiretime(k.trial(inc, t)) == d + 60_000
    m = await store.read("m")
    assert m.counters["predictions"] == most

    labels = [(t, 0) for t in ok]
    sync, lab = await store.label("m", inc, 0, fold=b"", limit=0, items=labels)
    assert [r.status for r in lab] == ["ok"] * most
    assert [r.seq for r in lab] == list(range(1, most + 1)) and sync.version == most
    assert await store.client.zcount(k.trials, 0, "+inf") == 0  # none pending
    assert await store.client.zcard(k.trials) == most  # each kept for retried labels
    m = await store.read("m")
    assert m.counters["labelled"] == most and m.version == most


async def test_a_trial_not_of_the_scripts_is_corrupt_data(store: ModelStore) -> None:
    inc = await create(store)
    await store.client.set(store.keys("m").trial(inc, "t1"), b"garbage")
    with pytest.raises(CorruptData, match="t1 is not one the scripts write"):
        await store.label("m", inc, 0, fold=b"", limit=10, items=[("t1", 0)])
    with pytest.raises(CorruptData, match="trial 't1' is not one the scripts write"):
        await store.read_outcome("m", inc, "t1")
