"""The service layer without HTTP: snapshots, reloads and several workers on one model."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from app.core.errors import TrialConflict
from app.core.settings import Settings
from app.service import replicas
from app.service.model_service import ModelService
from storage.client import close, connect
from storage.repository import ModelStore

pytestmark = pytest.mark.anyio
CONFIG: dict[str, Any] = {
    "labels": [1, -1],
    "input": {"attributes": {"feature_names": [f"w{i}" for i in range(40)]}},
    "learner": {"kind": "recycling", "size": 10, "learner": {"kind": "balanced-winnow"}},
    "label_ttl": 60.0,
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def services(redis_url: str, redis_prefix: str) -> AsyncIterator[list[ModelService]]:
    """Three workers' services on one Redis, snapshotting every 16 trials."""
    settings = Settings(
        redis_url=redis_url, key_prefix=redis_prefix, snapshot_every=16, log_retain=4
    )
    clients = [connect(redis_url) for _ in range(3)]
    out = [ModelService(ModelStore(c, redis_prefix), settings) for c in clients]
    yield out
    for s, c in zip(out, clients, strict=True):
        await s.close()
        await close(c)


def trials(n: int, seed: int) -> list[tuple[dict[str, Any], int]]:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(40)]
    out = []
    for _ in range(n):
        chosen = rng.choice(40, 5, replace=False)
        x = {"features": {words[i]: 1.0 for i in chosen}}
        out.append((x, 1 if chosen.min() < 8 else -1))
    return out


async def test_workers_interleave_and_agree(services: list[ModelService]) -> None:
    a, _, c = services
    await a.create_model("m", CONFIG)
    data = trials(90, 0)
    results: list[Any] = []
    for i, (x, y) in enumerate(data):
        worker = services[i % 3]
        if i % 2:
            results += await worker.trials.learn("m", [(x, y)])
        else:
            (p,) = await worker.trials.predict("m", [(x, None)])
            assert isinstance(p, dict)
            results += await c.trials.label("m", [(p["trial_id"], y)])
    assert all(isinstance(r, dict) for r in results)
    states = [(await s.export_state("m")) for s in services]
    assert states[0][0] == 90 and states[0] == states[1] == states[2]
    await asyncio.sleep(0.2)  # let the last outcomes fold
    stored = await a.store.read("m")
    assert stored.folded == 90
    assert stored.counters["mistakes"] == sum(r["mistake"] for r in results)
    assert stored.counters["updates"] == sum(r["updated"] for r in results)


async def test_snapshots_trim_the_log_and_a_new_worker_starts_from_one(
    services: list[ModelService], redis_url: str, redis_prefix: str
) -> None:
    a = services[0]
    await a.create_model("m", CONFIG)
    for chunk in range(5):
        await a.trials.learn("m", trials(20, chunk))
        await asyncio.sleep(0.1)  # fold, then the snapshot (a background task) follows
    snap = await a.store.read_snapshot("m")
    assert snap is not None and snap[0] >= 80
    n, first = await a.store.log_bounds("m")
    assert first <= snap[0] + 1 and n <= 100 - snap[0] + 4
    late = services[1]  # never saw this model: loads the snapshot, replays the rest
    assert await late.export_state("m") == await a.export_state("m")
    assert (await late.replicas.live("m")).snapshot_version == snap[0]


async def test_a_snapshot_takes_its_outcomes_to_fold_as_it_is_sent(
    services: list[ModelService],
) -> None:
    """A snapshot exports the state off the event loop. Calls sent meanwhile report the
    outcomes still to fold, and Redis folds them: had the snapshot taken them first (to
    send once its export is done), Redis would ignore what those calls report after
    them, and the model's counters would stall for a second or more each snapshot."""
    a = services[0]
    await a.create_model("m", CONFIG)
    await a.trials.learn("m", trials(10, 0))
    m = await a.replicas.live("m")
    assert m.unfolded and m.folded < 10  # folded by the next call, or soon after
    started, go = threading.Event(), threading.Event()
    export = m.kept_state

    def slow_export() -> bytes:
        started.set()
        go.wait(10)
        return export()

    m.kept_state = slow_export  # type: ignore[method-assign]
    snapshot = asyncio.create_task(a.replicas._snapshot(m))
    for _ in range(10_000):  # the snapshot exports through kept_state
        if started.is_set():
            break
        await asyncio.sleep(0.001)
    assert started.is_set(), "the snapshot never exported the model's state"
    learn = asyncio.create_task(a.trials.learn("m", trials(1, 1)))
    for _ in range(500):  # its script ran (its replay waits for the export)
        if (await a.store.read("m")).version == 11:
            break
        await asyncio.sleep(0.002)
    got = await a.store.read("m")
    go.set()
    await snapshot
    await learn
    assert got.version == 11 and got.folded == 10
    snap = await a.store.read_snapshot("m")
    assert snap is not None and snap[0] == 10
    await a.replicas.sync(await a.replicas.live("m"))
    assert (await a.store.read("m")).folded == 11


async def test_outcomes_sent_after_lost_ones_are_sent_again_by_the_next_call(
    services: list[ModelService], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis folds outcomes in order: those a call sends after outcomes that never
    arrived (their call failed, or a cluster's redirect sent it again later) are
    ignored. The reply says so, and the next call sends every unfolded outcome again,
    rather than a second later."""
    monkeypatch.setattr(replicas, "FLUSH_DELAY", 60.0)  # no idle fold in between
    a = services[0]
    await a.create_model("m", CONFIG)
    await a.trials.learn("m", trials(10, 0))
    m = await a.replicas.live("m")
    assert m.unfolded and (await a.store.read("m")).folded == 0
    assert m.fold_payload()  # 1-10: sent with a call that fails
    await a.trials.learn("m", trials(1, 1))  # 11 reaches Redis with no outcome to send
    await a.trials.learn("m", trials(1, 2))  # sends 11, ignored
    await a.trials.learn("m", trials(1, 3))  # sends 1-12 again
    assert (await a.store.read("m")).folded == 12


async def test_outcomes_a_snapshot_sent_after_lost_ones_are_sent_again_by_the_next_call(
    services: list[ModelService], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot's reply says when Redis ignored the outcomes it sent, as a trial
    call's does: the snapshot is not kept, and the next call sends every unfolded
    outcome again."""
    monkeypatch.setattr(replicas, "FLUSH_DELAY", 60.0)  # no idle fold in between
    a = services[0]
    await a.create_model("m", CONFIG)
    await a.trials.learn("m", trials(10, 0))
    m = await a.replicas.live("m")
    assert m.fold_payload()  # 1-10: sent with a call that fails
    await a.trials.learn("m", trials(1, 1))  # 11 reaches Redis with no outcome to send
    await a.replicas._snapshot(m)  # sends 11, ignored: not kept
    assert m.snapshot_version == 0 and (await a.store.read_snapshot("m")) is None
    await a.trials.learn("m", trials(1, 2))  # sends 1-11 again, then appends 12
    assert (await a.store.read("m")).folded == 11
    await a.replicas._snapshot(m)  # sends 12
    assert m.snapshot_version == 12 and (await a.store.read_snapshot("m")) is not None


async def test_state_import_reaches_other_workers(services: list[ModelService]) -> None:
    a, b, _ = services
    await a.create_model("m", CONFIG)
    await a.create_model("n", CONFIG)
    await a.trials.learn("m", trials(30, 1))
    await b.trials.learn("n", trials(5, 2))  # b holds n in memory
    _, state = await a.export_state("m")
    seq = await a.import_state("n", state)
    assert seq == 6
    await b.trials.learn("n", trials(1, 3))  # b replays the import entry: reloads, then learns
    (_, from_b), (_, from_a) = await b.export_state("n"), await a.export_state("n")
    assert from_a == from_b and from_b["counters"]["trials"] == 31


async def test_least_recently_used_models_leave_memory(redis_url: str, redis_prefix: str) -> None:
    settings = Settings(redis_url=redis_url, key_prefix=redis_prefix, max_models=2)
    client = connect(redis_url)
    service = ModelService(ModelStore(client, redis_prefix), settings)
    try:
        for name in ("a", "b", "c"):
            await service.create_model(name, CONFIG)
            await service.trials.learn(name, trials(5, 1))
        await service.trials.learn("b", trials(5, 2))  # a is now the least recently used
        await service.trials.learn("c", trials(5, 3))
        assert set(service.replicas._live) == {"b", "c"}
        results = await service.trials.learn("a", trials(5, 4))  # loaded again from Redis
        assert all(isinstance(r, dict) for r in results)
        assert set(service.replicas._live) == {"a", "c"}
        version, state = await service.export_state("a")
        assert version == 10 and state["counters"]["trials"] == 10
    finally:
        await service.close()
        await close(client)


FUSION: dict[str, Any] = {
    "labels": ["a", "b", "c"],
    "input": {"experts": {"expert_names": ["e0", "e1", "e2", "e3"]}},
    "learner": {"kind": "committee"},
    "label_ttl": 60.0,
}


@pytest.fixture
async def either_form(redis_url: str, redis_prefix: str) -> AsyncIterator[list[ModelService]]:
    """Two workers on one Redis: the first keeps full rows of votes compactly, the
    second in the older form (``compact_votes`` off), as during a rolling upgrade."""
    clients = [connect(redis_url) for _ in range(2)]
    services = [
        ModelService(
            ModelStore(c, redis_prefix),
            Settings(redis_url=redis_url, key_prefix=redis_prefix, compact_votes=compact),
        )
        for c, compact in zip(clients, (True, False), strict=True)
    ]
    yield services
    for s, c in zip(services, clients, strict=True):
        await s.close()
        await close(c)


async def test_workers_storing_votes_in_either_form_agree(either_form: list[ModelService]) -> None:
    """Each worker reads the other's entries, and they learn the same."""
    services = either_form
    rng = np.random.default_rng(5)
    await services[0].create_model("f", FUSION)
    results: list[Any] = []
    for i in range(60):
        worker = services[i % 2]
        # every expert scores every label, but now and then one leaves a label out
        votes = {f"e{e}": {c: float(rng.uniform(0.1, 1)) for c in "abc"} for e in range(4)}
        if i % 5 == 0:
            del votes["e1"]["b"]
        x, y = {"experts": votes}, "abc"[int(rng.integers(3))]
        if i % 3:
            results += await worker.trials.learn("f", [(x, y)])
        else:
            (p,) = await worker.trials.predict("f", [(x, None)])
            assert isinstance(p, dict)
            results += await services[1 - i % 2].trials.label("f", [(p["trial_id"], y)])
    assert all(isinstance(r, dict) for r in results)
    states = [await s.export_state("f") for s in services]
    assert states[0][0] == 60 and states[0] == states[1]
    live = [await s.replicas.live("f") for s in services]
    assert [m.quarantined for m in live] == [0, 0]
    log = await services[0].store.read_log("f", 0, 100)
    tags = {dict(zip(f[::2], f[1::2], strict=True))[b"x"][:1] for _, f in log}
    assert tags == {b"E", b"F"}


async def test_a_label_applied_from_the_instance_kept_learns_what_decoding_learns(
    either_form: list[ModelService],
) -> None:
    """A worker applies the label of a prediction it stored from the instance it kept,
    whoever labelled it, and the other worker from its copy in the log (in either stored
    form, votes of every kind): both learn the same, and only the predictions still
    waiting for a label stay kept."""
    services = either_form
    rng = np.random.default_rng(7)
    await services[0].create_model("f", FUSION)
    before = [s.replicas.kept.hits for s in services]
    unlabelled = 0
    for i in range(80):
        worker = services[i % 2]
        votes: dict[str, Any] = {
            f"e{e}": {c: float(rng.uniform(0.1, 1)) for c in "abc"} for e in range(4)
        }
        if i % 4 == 0:
            votes["e2"] = "abc"[int(rng.integers(3))]  # a bare label: not a full row
        (p,) = await worker.trials.predict("f", [({"experts": votes}, None)])
        assert isinstance(p, dict)
        if i % 10 == 9:
            unlabelled += 1  # kept until a label comes (or room is needed)
            continue
        labeller = worker if i % 3 else services[1 - i % 2]
        (r,) = await labeller.trials.label("f", [(p["trial_id"], "abc"[int(rng.integers(3))])])
        assert isinstance(r, dict)
    states = [await s.export_state("f") for s in services]
    assert states[0][0] == 72 and states[0] == states[1]
    # each label entry met its prediction's worker (in the label call, or replayed from
    # the log after the other worker's): taken from memory there, decoded on the other
    hits = [s.replicas.kept.hits - b for s, b in zip(services, before, strict=True)]
    assert min(hits) > 0 and sum(hits) == 72
    assert sum(len(s.replicas.kept) for s in services) == unlabelled
    assert [(await s.replicas.live("f")).quarantined for s in services] == [0, 0]


async def test_a_worker_holding_no_instances_decodes_every_label_to_the_same_state(
    redis_url: str, redis_prefix: str
) -> None:
    """With ``kept_bytes`` 0 a worker holds no instance and applies each label from the
    log; it learns what a worker that holds them learns, trial for trial."""
    states = []
    for most, prefix in ((0, f"{redis_prefix}-none"), (1 << 20, f"{redis_prefix}-held")):
        client = connect(redis_url)
        settings = Settings(redis_url=redis_url, key_prefix=prefix, kept_bytes=most)
        service = ModelService(ModelStore(client, prefix), settings)
        try:
            await service.create_model("f", FUSION)
            rng = np.random.default_rng(11)
            for _ in range(30):
                votes = {f"e{e}": {c: float(rng.uniform(0.1, 1)) for c in "abc"} for e in range(4)}
                (p,) = await service.trials.predict("f", [({"experts": votes}, None)])
                assert isinstance(p, dict)
                label = "abc"[int(rng.integers(3))]
                (r,) = await service.trials.label("f", [(p["trial_id"], label)])
                assert isinstance(r, dict)
            kept = service.replicas.kept
            assert (kept.most, kept.hits > 0, len(kept)) == (most, most > 0, 0)
            states.append(await service.export_state("f"))
        finally:
            await service.close()
            await close(client)
    assert states[0][0] == 30 and states[0] == states[1]


async def test_a_prediction_retried_on_a_worker_of_the_other_form_is_answered(
    either_form: list[ModelService],
) -> None:
    """A predict retried with its trial id on a worker that keeps votes in the other form
    gets the first answer, not a conflict; another instance under that id still
    conflicts, in either form."""
    services = either_form
    await services[0].create_model("f", FUSION)
    votes = {f"e{e}": {c: 0.1 + 0.2 * e + 0.05 * j for j, c in enumerate("abc")} for e in range(4)}
    other = {"experts": {**votes, "e0": {"a": 0.9, "b": 0.05, "c": 0.05}}}
    for first, retry in ((0, 1), (1, 0)):
        t = f"t{first}"
        items = [({"experts": votes}, t), ({"experts": votes}, None)]
        got = await services[first].trials.predict("f", items)
        again = await services[retry].trials.predict("f", items[:1])
        assert again == got[:1]
        for s in services:  # another instance under the same trial id
            (refused,) = await s.trials.predict("f", [(other, t)])
            assert isinstance(refused, TrialConflict), refused
        # the trial is labelled once, and then the same retry is a conflict
        (labelled,) = await services[retry].trials.label("f", [(t, "a")])
        assert isinstance(labelled, dict)
        (late,) = await services[first].trials.predict("f", items[:1])
        assert isinstance(late, TrialConflict), late
