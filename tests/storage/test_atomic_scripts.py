"""Atomic create and delete, incarnation-scoped trials, the scripts' own checks, quotas and
idempotency records, against a real Redis."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import orjson
import pytest

from models.core.instance import Attributes
from storage.codec import encode_instance
from storage.errors import Conflict, CorruptData, Full, ModelNotFound
from storage.repository import GRAVE_BATCH, Idempotency, LearnGroup, ModelStore

pytestmark = pytest.mark.anyio
CONFIG = {"labels": ["a", "b"], "input": {"attributes": {"n_features": 4}}, "label_ttl": 60}


def x(i: int) -> bytes:
    return encode_instance(Attributes([i % 4], [1.0]))


async def create(store: ModelStore, name: str = "m", **kw: Any) -> str:
    made = await store.create(name, CONFIG, n_classes=2, size=4, most=kw.pop("most", 100), **kw)
    return made.incarnation


async def keys(store: ModelStore) -> set[str]:
    return {k.decode() for k in await store.client.keys(f"{store.prefix}:*")}


async def predict(
    store: ModelStore, inc: str, ids: list[str], most: int = 10_000, data: bytes | None = None
) -> list[str]:
    """The statuses of storing a prediction under each of ``ids``, of instance ``data``
    (else one of its own)."""
    items = [(t, x(i) if data is None else data, 0, b"\x00" * 16) for i, t in enumerate(ids)]
    _, res = await store.predict(
        "m",
        inc,
        0,
        strict=False,
        ttl_ms=60_000,
        fold=b"",
        limit=0,
        most_pending=most,
        items=items,
    )
    assert res is not None
    return [r.status for r in res]


@pytest.mark.parametrize("n", [3, GRAVE_BATCH + 5])
async def test_delete_leaves_no_key_behind(store: ModelStore, n: int) -> None:
    inc = await create(store)
    assert await predict(store, inc, [f"t{i}" for i in range(n)]) == ["ok"] * n
    await store.learn(
        "m", inc, 0, fold=b"", limit=0, keep_ms=1000, groups=[LearnGroup([(x(1), 1)])]
    )
    assert len(await keys(store)) > n
    await store.delete("m")
    left = await keys(store)
    if n > GRAVE_BATCH:  # the trial hashes wait in a grave, listed for the sweep
        assert store.registry.graves in left
    assert await store.sweep() == 0
    assert await keys(store) == set()
    assert await store.names() == []


async def test_a_trial_of_a_deleted_model_is_unknown_to_its_successor(store: ModelStore) -> None:
    old = await create(store)
    assert await predict(store, old, ["t1"]) == ["ok"]
    await store.delete("m")
    new = await create(store)
    _, res = await store.label("m", new, 0, fold=b"", limit=0, items=[("t1", 1)])
    assert res[0].status == "unknown"
    with pytest.raises(ModelNotFound):  # and the old incarnation's calls are refused whole
        await store.label("m", old, 0, fold=b"", limit=0, items=[("t1", 1)])
    assert (await store.read("m")).version == 0


async def test_scripts_refuse_indices_beyond_the_model(store: ModelStore) -> None:
    inc = await create(store)
    assert await predict(store, inc, ["t1"]) == ["ok"]
    _, res = await store.label("m", inc, 0, fold=b"", limit=0, items=[("t1", 2)])
    assert res[0].status == "invalid"
    beyond = encode_instance(Attributes([7], [1.0]))
    for items in ([(x(0), 0), (x(1), 2)], [(x(0), 0), (beyond, 0)], [(b"Qxx", 0)]):
        with pytest.raises(CorruptData, match="nothing was written"):
            await store.learn(
                "m", inc, 0, fold=b"", limit=0, keep_ms=1000, groups=[LearnGroup(items)]
            )
    m = await store.read("m")
    assert m.version == 0 and m.counters["learned"] == 0 and m.counters["labelled"] == 0


def rows(k: int, experts: list[int]) -> bytes:
    """A full-row instance: ``k`` votes for each of ``experts``."""
    votes = np.ones(len(experts) * max(k, 0), "<f8").tobytes()
    return b"F" + np.array([k, *experts], "<i4").tobytes() + votes


async def test_scripts_check_rows_of_votes_against_the_model(store: ModelStore) -> None:
    inc = await create(store)  # 2 classes, 4 coordinates
    good = [rows(2, [0, 3]), rows(1, [1])]
    bad = [rows(3, [0]), rows(2, [4]), rows(0, []), rows(2, [0])[:-1], b"F\x02\x00"]
    for data in bad:
        with pytest.raises(CorruptData, match="nothing was written"):
            await store.learn(
                "m", inc, 0, fold=b"", limit=0, keep_ms=1000, groups=[LearnGroup([(data, 0)])]
            )
        assert await predict(store, inc, ["t"], data=data) == ["invalid"], data
    assert (await store.read("m")).version == 0
    _, res = await store.learn(
        "m", inc, 0, fold=b"", limit=0, keep_ms=1000, groups=[LearnGroup([(g, 1) for g in good])]
    )
    assert res[0].status == "ok" and (await store.read("m")).version == 2


async def test_create_is_atomic_and_bounded(store: ModelStore) -> None:
    await create(store, "a", most=2)
    await create(store, "b", most=2)
    with pytest.raises(Full) as e:
        await create(store, "c", most=2)
    assert (e.value.limit, e.value.most) == ("max_stored_models", 2)
    assert await store.names() == ["a", "b"]
    with pytest.raises(Conflict):  # taken, and the count is not what refuses it
        await create(store, "a", most=1)


async def test_pending_trials_are_bounded(store: ModelStore) -> None:
    inc = await create(store)
    assert await predict(store, inc, ["a", "b", "c"], most=2) == ["ok", "ok", "full"]
    # a retry of a stored one is still answered
    assert await predict(store, inc, ["a"], most=2) == ["existing"]


async def test_idempotent_learn_appends_once(store: ModelStore) -> None:
    inc = await create(store)
    idem = Idempotency("k1", "h1")
    group = LearnGroup([(x(0), 0), (x(1), 1)], idem)
    _, res = await store.learn("m", inc, 0, fold=b"", limit=10, keep_ms=60_000, groups=[group])
    assert (res[0].status, res[0].first) == ("ok", 1)
    await store.keep_answer("m", idem, b"[[0,true],[0,false]]")
    _, res = await store.learn("m", inc, 0, fold=b"", limit=10, keep_ms=60_000, groups=[group])
    r = res[0]
    assert (r.status, r.first, r.count, r.incarnation) == ("repeat", 1, 2, inc)
    assert orjson.loads(r.answer) == [[0, True], [0, False]]
    other = LearnGroup([(x(2), 0)], Idempotency("k1", "h2"))
    plain = LearnGroup([(x(3), 1)])
    _, res = await store.learn(
        "m", inc, 2, fold=b"", limit=10, keep_ms=60_000, groups=[other, plain]
    )
    assert [r.status for r in res] == ["mismatch", "ok"] and res[1].first == 3
    assert (await store.read("m")).version == 3
    ttl = await store.client.pttl(store.keys("m").idem("k1"))
    assert 0 < ttl <= 60_000


async def test_idempotent_create_delete_and_import(store: ModelStore) -> None:
    idem = Idempotency("c", "body")
    first = await store.create("m", CONFIG, n_classes=2, size=4, most=10, idem=idem)
    again = await store.create("m", CONFIG, n_classes=2, size=4, most=10, idem=idem)
    assert (again.repeat, again.incarnation, again.created) == (
        True,
        first.incarnation,
        first.created,
    )
    with pytest.raises(Conflict, match="another request"):
        await store.create("m", CONFIG, n_classes=2, size=4, most=10, idem=Idempotency("c", "x"))
    inc = first.incarnation
    imp = Idempotency("i", "state")
    assert await store.import_state("m", inc, 0, b"{}", b"", 10, idem=imp) == (None, 1)
    assert await store.import_state("m", inc, 0, b"{}", b"", 10, idem=imp) == (None, 1)
    assert (await store.read("m")).version == 1
    gone = Idempotency("d", "delete")
    await store.delete("m", idem=gone)
    await store.delete("m", idem=gone)  # a retried delete that was done: no 404
    with pytest.raises(ModelNotFound):
        await store.delete("m")


async def test_a_delete_retried_after_the_model_was_made_again_lists_no_grave(
    store: ModelStore,
) -> None:
    """A retry of a delete that was done (its answer lost) finds the name made again by
    someone else: it deletes nothing, and leaves no grave listed for the model that
    lives on (a sweep would skip it for as long as that model lives)."""
    gone = Idempotency("d", "delete")
    await create(store)
    await store.delete("m", idem=gone)
    again = await create(store)
    await store.delete("m", idem=gone)  # the retry: answered as the first was
    assert (await store.read("m")).incarnation == again
    assert await store.client.zrange(store.registry.graves, 0, -1) == []
    assert await store.sweep() == 0
    assert await store.client.zcard(store.registry.unsettled) == 0


async def test_quarantined_and_refused_outcomes_are_counted(store: ModelStore) -> None:
    inc = await create(store)
    group = LearnGroup([(x(i), i % 2) for i in range(3)])
    await store.learn("m", inc, 0, fold=b"", limit=0, keep_ms=1000, groups=[group])
    fold = orjson.dumps({"a": 1, "e": [[0, 0, 1, ""], [1, -1, 2, ""], [0, 1, 3, ""]]})
    await store.sync("m", inc, 3, fold, 0)
    m = await store.read("m")
    assert m.folded == 3 and m.counters["quarantined"] == 1 and m.counters["refused"] == 1
    assert m.counters["mistakes"] == 1 and m.counters["updates"] == 1
    assert m.confusion == {(0, 0): 1, (0, 1): 1}


def now_ms() -> int:
    return int(time.time() * 1000)


async def age_unsettled(store: ModelStore) -> None:
    """Make every unsettled registry entry older than any create or delete takes."""
    r = store.registry
    for name in await store.client.zrange(r.unsettled, 0, -1):
        await store.client.zadd(r.unsettled, {name: 1})


async def test_a_create_cut_after_its_registration_is_settled_by_the_sweep(
    store: ModelStore,
) -> None:
    r = store.registry
    # the first step of a create whose worker died before the second
    await store.calls.run(
        "REGISTER", "m", [r.models, r.unsettled], ["m", "0123abcd", 100, now_ms()]
    )
    assert await store.names() == ["m"]  # listed, but no model behind the name
    with pytest.raises(ModelNotFound):
        await store.read("m")
    await store.sweep()  # too young to settle: a create may still be under way
    assert await store.names() == ["m"]
    await age_unsettled(store)
    await store.sweep()
    assert await store.names() == []
    assert await keys(store) == set()


async def test_a_delete_cut_before_its_last_step_is_settled_by_the_sweep(
    store: ModelStore,
) -> None:
    inc = await create(store)
    r = store.registry
    k = store.keys("m")
    # the first two steps of a delete whose worker died before the third
    await store.calls.run("UNSETTLE", "m", [r.models, r.unsettled], ["m", now_ms()])
    args = ["", 1000, inc]
    fixed = [*k.all_fixed(), k.meta, k.grave(inc)]
    assert (await store.calls.run("DELETE", "m", fixed, args))[0] == b"ok"
    assert await store.names() == ["m"]
    await store.sweep()
    assert await store.names() == ["m"]
    await age_unsettled(store)
    await store.sweep()
    assert await store.names() == []
    # a model made again under the name meanwhile is listed whatever the sweep does
    again = await create(store)
    await age_unsettled(store)
    await store.sweep()
    assert await store.names() == ["m"]
    assert await store.client.hget(r.models, "m") == again.encode()


async def test_racing_creates_and_deletes_leave_the_registry_true(store: ModelStore) -> None:
    """Creates and deletes of the same names at once: afterwards the registry lists
    exactly the models that exist, each with its incarnation."""

    async def churn(name: str, seed: int) -> None:
        for i in range(12):
            try:
                if (i + seed) % 3 == 2:
                    await store.delete(name)
                else:
                    await create(store, name)
            except (Conflict, ModelNotFound):
                pass

    await asyncio.gather(*(churn(n, s) for n in ("a", "b") for s in range(4)))
    r = store.registry
    listed = {k.decode(): v.decode() for k, v in (await store.client.hgetall(r.models)).items()}
    alive = {}
    for name in ("a", "b"):
        inc = await store.client.hget(store.keys(name).meta, "incarnation")
        if inc is not None:
            alive[name] = inc.decode()
    assert listed == alive
    assert await store.client.zcard(r.unsettled) == 0


async def test_the_single_node_sets_move_into_the_registry(store: ModelStore) -> None:
    inc = await create(store)
    r = store.registry
    # as the single-node layout kept them: plain sets, the registry empty
    await store.client.delete(r.models)
    legacy = f"{store.prefix}:models"
    await store.client.sadd(legacy, "m", "gone-long-ago")
    await store.client.sadd(f"{store.prefix}:graves", f"{store.prefix}:{{old}}:grave:ab12")
    assert await store.names() == []
    await store.adopt_legacy()
    await store.adopt_legacy()  # repeatable: workers start together
    assert await store.names() == ["m"]
    assert await store.client.hget(r.models, "m") == inc.encode()
    assert await store.sweep() == 0
    assert await keys(store) == {*(store.keys("m").all_fixed()[:1]), r.models}
