"""A worker's copy of a model: replay and the outcomes it reports for folding."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from app.service import live_model, replicas
from app.service.live_model import LiveModel
from models.inputs.batch import RawExperts
from storage.codec import encode_instance
from storage.repository import Sync

SERIALIZE_NUMPY = orjson.OPT_SERIALIZE_NUMPY
CONFIG = {
    "labels": ["a", "b"],
    "input": {"attributes": {"n_features": 4}},
    "learner": {"kind": "balanced-winnow"},
    "label_ttl": 60.0,
}


def payload(m: LiveModel, upto: int | None = None) -> list[int]:
    raw = m.fold_payload(upto)
    if not raw:
        return []
    doc = orjson.loads(raw)
    return list(range(doc["a"], doc["a"] + len(doc["e"])))


def test_outcomes_are_sent_once_and_again_when_unacknowledged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(live_model.time, "monotonic", lambda: now[0])
    m = LiveModel("m", "inc", CONFIG)
    x = m.encode({"features": [1, 0, 1, 0]})
    m.apply_own(1, [(x, 0), (x, 1), (x, 0)])
    assert payload(m) == [1, 2, 3]
    assert payload(m) == []  # in flight: not sent twice
    m.apply_own(4, [(x, 1)])
    assert payload(m) == [4]
    m.acknowledge(Sync(version=4, folded=2, entries=[]))
    assert sorted(m.unfolded) == [3, 4]
    assert payload(m) == []
    now[0] += live_model.RESEND + 0.1  # still not folded a while later: send again
    assert payload(m) == [3, 4]
    m.acknowledge(Sync(version=4, folded=4, entries=[]))
    assert m.unfolded == {} and payload(m) == []


def test_outcomes_sent_up_to_a_version_leave_the_rest_to_send(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A snapshot reports the outcomes up to its state's version only; those after it are
    sent by the next call, and one that finds nothing to send marks nothing as sent."""
    now = [100.0]
    monkeypatch.setattr(live_model.time, "monotonic", lambda: now[0])
    m = LiveModel("m", "inc", CONFIG)
    x = m.encode({"features": [1, 0, 1, 0]})
    m.apply_own(1, [(x, 0), (x, 1), (x, 0), (x, 1)])
    assert payload(m, upto=0) == [] and m.fold_sent == 0
    assert payload(m, upto=2) == [1, 2]
    assert payload(m, upto=2) == []  # in flight
    assert payload(m) == [3, 4]
    m.acknowledge(Sync(version=4, folded=2, entries=[]))
    # not folded a while later: a snapshot at 2 sends none, and leaves the resend of 3
    # and 4 to the next call
    now[0] += live_model.RESEND + 0.1
    assert payload(m, upto=2) == []
    assert payload(m) == [3, 4]


def test_outcomes_redis_ignored_are_sent_again_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reply that says the call's outcomes were not folded (those before them were
    not yet) has the next call send again from the first unfolded, without waiting for
    the resend; a reply that does not say so leaves what is in flight alone."""
    monkeypatch.setattr(live_model.time, "monotonic", lambda: 100.0)
    m = LiveModel("m", "inc", CONFIG)
    x = m.encode({"features": [1, 0, 1, 0]})
    m.apply_own(1, [(x, 0), (x, 1), (x, 0)])
    assert payload(m) == [1, 2, 3]  # lost with its call
    m.apply_own(4, [(x, 1), (x, 0)])
    assert payload(m) == [4, 5]
    m.acknowledge(Sync(version=5, folded=0, entries=[]))  # the reply of 1-3's call, say
    assert payload(m) == []
    m.acknowledge(Sync(version=5, folded=0, entries=[], fold_ignored=True))
    assert payload(m) == [1, 2, 3, 4, 5]
    m.acknowledge(Sync(version=5, folded=5, entries=[]))
    assert m.unfolded == {} and payload(m) == []


FUSION = {
    "labels": ["a", "b", "c"],
    "input": {"experts": {"expert_names": ["e0", "e1", "e2"]}},
    "learner": {"kind": "committee"},
    "label_ttl": 60.0,
}


def test_entries_applied_together_are_applied_as_one_by_one_across_a_change() -> None:
    """Entries replayed in one call are decoded together up to a change of the input,
    and those after it against the input it made: a vote of the expert it added is the
    model's, not a fault; a corrupt entry is quarantined alike."""
    m = LiveModel("m", "inc", FUSION)
    votes = [{"e0": "a", "e1": "b", "e2": "c"}, {"e1": "c", "e2": "c"}, {"e0": "b"}]
    before = [encode_instance(m.encode({"experts": v})) for v in votes]
    grown = LiveModel("m", "inc", FUSION)
    grown.take_change(1, orjson.dumps({"experts": {"add": ["e3"]}}))
    after = encode_instance(grown.encode({"experts": {"e3": "b", "e0": "a"}}))
    log = [
        *[
            (b"%d-0" % (t + 1), [b"k", b"n", b"x", x, b"y", b"%d" % t])
            for t, x in enumerate(before)
        ],
        (b"4-0", [b"k", b"n", b"x", b"E" + b"\x00" * 15, b"y", b"0"]),  # corrupt
        (b"5-0", [b"k", b"c", b"c", orjson.dumps({"experts": {"add": ["e3"]}})]),
        (b"6-0", [b"k", b"n", b"x", after, b"y", b"1"]),
        (b"7-0", [b"k", b"n", b"x", before[0], b"y", b"2"]),
    ]
    together, alone = LiveModel("m", "inc", FUSION), LiveModel("m", "inc", FUSION)
    together.apply(log)
    for entry in log:
        alone.apply([entry])
    assert together.version == alone.version == 7
    assert together.quarantined == alone.quarantined == 1  # the corrupt one alone
    assert together.size == alone.size == 4
    assert orjson.dumps(together.learner.export_state()) == orjson.dumps(
        alone.learner.export_state()
    )
    assert together.learner.trials_ == 5


def test_own_labels_replay_as_their_entries_in_the_log_do() -> None:
    """Labels a worker applied are replayed from what the script answered (instance as
    stored, class, prediction served, trial id) as the same entries read from the log
    are: the same learner, outcomes and stamp; an instance that does not decode, or a
    prediction beyond the model's labels, quarantined alike; an instance the worker
    holds taken as it is."""
    m = LiveModel("m", "inc", FUSION)
    votes = [{"e0": "a", "e1": "b"}, {"e1": "c", "e2": "c"}, {"e0": "b"}, {"e2": "a"}]
    xs = [m.encode({"experts": v}) for v in votes]
    data = [encode_instance(x) for x in xs]
    items = [
        (data[0], 0, 1, "t1"),
        (b"E" + b"\x00" * 15, 1, 0, "t2"),  # its expert beyond the model's
        (data[1], 2, 2, "t3"),
        (data[2], 1, 7, "t4"),  # served a prediction the model cannot have made
        (data[3], 0, 0, "t5"),
    ]
    log = [
        (
            b"%d-0" % (3 + i),
            [b"k", b"l", b"t", t.encode(), b"x", x, b"y", b"%d" % y, b"p", b"%d" % p],
        )
        for i, (x, y, p, t) in enumerate(items)
    ]
    log = [(i, [*f, b"v", b"1", b"w", b"abc"]) for i, f in log]
    start = [
        (b"1-0", [b"k", b"n", b"x", data[3], b"y", b"1", b"w", b"ab"]),
        (b"2-0", [b"k", b"n", b"x", data[0], b"y", b"2", b"w", b"ab"]),
    ]
    held = {data[1]: xs[1]}
    own, read = LiveModel("m", "inc", FUSION), LiveModel("m", "inc", FUSION)
    own.apply(start)
    own.apply_labels(3, items, "abc", held.get)
    read.apply(start + log)
    assert own.version == read.version == 7 and own.stamp == read.stamp == "abc"
    assert own.quarantined == read.quarantined == 2
    assert own.unfolded == read.unfolded and own.recent == read.recent
    assert own.unfolded[5] == (2, 2, own.recent[5].updated, "t3")
    assert orjson.dumps(own.learner.export_state()) == orjson.dumps(read.learner.export_state())
    assert own.learner.trials_ == 5  # two learns and three labels
    before = orjson.dumps(own.learner.export_state())
    own.apply_labels(3, items, "abc")  # applied already: nothing again
    assert own.version == 7 and orjson.dumps(own.learner.export_state()) == before
    with pytest.raises(live_model.LogGap):  # after a gap: the log is read first
        own.apply_labels(9, items[:1], "abd")


def _own_items(m: LiveModel, config: dict[str, Any], seed: int) -> list[tuple[Any, int]]:
    """Learn items of ``config``'s form, as the worker encodes them."""
    rng = np.random.default_rng(seed)
    k = len(config["labels"])
    if "experts" not in config["input"]:
        items = [
            (m.encode({"features": rng.integers(0, 2, 4).tolist()}), int(rng.integers(k)))
            for _ in range(3 * live_model.BATCH_REPLAY)
        ]
        return [(x, y) for x, y in items if x.indices.size]
    names = config["input"]["experts"]["expert_names"]
    instances = [
        {"experts": {e: str(rng.choice(config["labels"])) for e in names}}
        for _ in range(3 * live_model.BATCH_REPLAY)
    ]
    return [(x, int(rng.integers(k))) for x in m.encode_each(instances)]


@pytest.mark.parametrize("config", [CONFIG, FUSION], ids=["attributes", "experts"])
@pytest.mark.parametrize("folded", [0, 7, 30])
def test_a_run_learned_in_one_compiled_call_keeps_the_outcomes_one_by_one_keeps(
    monkeypatch: pytest.MonkeyPatch, folded: int, config: dict[str, Any]
) -> None:
    """Own learn entries replayed in one compiled call record what replaying them one by
    one records: each outcome by seq (only the last RECENT kept) and those not yet
    folded for the next fold, each under its own key; the monitors judge them alike, and
    the learner ends in the same state."""
    monkeypatch.setattr(live_model, "RECENT", 20)
    together, alone = LiveModel("m", "inc", config), LiveModel("m", "inc", config)
    items = _own_items(together, config, folded)
    for m in (together, alone):
        m.folded = folded
    keys = [f"k{t % 5}" for t in range(len(items))]  # each entry under its own key
    one_by_one = []
    replay = together._replay
    monkeypatch.setattr(together, "_replay", lambda *a: one_by_one.append(a) or replay(*a))
    together.apply_own(1, items, key=keys)
    assert len(one_by_one) < len(items) // 2  # the rest compiled
    for t, item in enumerate(items):
        alone.apply_own(t + 1, [item], key=keys[t])
    assert together.version == alone.version == len(items)
    assert together.recent == alone.recent
    assert sorted(together.recent) == list(range(len(items) - 19, len(items) + 1))
    assert together.unfolded == alone.unfolded
    assert sorted(together.unfolded) == list(range(folded + 1, len(items) + 1))
    assert [u[3] for u in together.unfolded.values()] == [f"!{k}" for k in keys[folded:]]
    assert any(a.updated for a in together.recent.values())
    assert any(not a.updated for a in together.recent.values())
    assert together.learner.export_state() == alone.learner.export_state()
    watched = [
        orjson.dumps({n: w.export() for n, w in m.monitors.items()}, option=SERIALIZE_NUMPY)
        for m in (together, alone)
    ]
    assert watched[0] == watched[1]


def _arrays(x: Any) -> list[np.ndarray]:
    return [getattr(x, n) for n in x.__slots__ if isinstance(getattr(x, n), np.ndarray)]


def test_kept_instances_are_taken_once_and_the_oldest_go_first() -> None:
    xs = [live_model.Attributes([0, t + 1], [1.0, 0.5]) for t in range(3)]
    assert all(a.base is None for x in xs for a in _arrays(x))  # arrays of their own
    data = [bytes([t]) * 32 for t in range(3)]  # as if each were stored so
    cost = len(data[0]) + live_model.KEPT_ENTRY + sum(a.nbytes for a in _arrays(xs[0]))
    kept = live_model.Kept(most=2 * cost)
    for d, x in zip(data, xs, strict=True):
        kept.put(d, x)
    assert len(kept) == 2 and kept.take(data[0]) is None  # the oldest made room
    assert kept.take(data[2]) is xs[2] and kept.take(data[2]) is None  # taken once
    assert kept.hits == 1 and kept.held == cost
    kept.put(b"x" * kept.most, xs[0])  # beyond what it holds at all: not held
    assert len(kept) == 1
    assert kept.take(data[1]) is xs[1] and kept.held == 0


def _group(kind: str) -> tuple[LiveModel, list[Any], Any]:
    """A model, a group of its instances encoded together (as a group or a batch is),
    and an instance over arrays of its own."""
    if kind == "experts":
        m = LiveModel("m", "inc", FUSION)
        texts = [orjson.dumps({"e0": "abc"[t % 3], "e1": [0.5, 0.2, 0.3]}) for t in range(50)]
        many = m.encode_each([RawExperts(text, 0, len(text)) for text in texts])
        return m, many, m.encode({"experts": {"e0": "a"}})
    m = LiveModel("m", "inc", CONFIG)
    many = m.encode_each([{"features": [t % 2, 1, (t // 2) % 2, 0.5]} for t in range(50)])
    return m, many, live_model.Attributes([0, 3], [1.0, 0.25])


@pytest.mark.parametrize("kind", ["experts", "attributes"])
def test_a_batch_is_counted_while_any_of_its_instances_is_kept(kind: str) -> None:
    """A batch's instances view the batch's arrays and are held as they are: the arrays
    are counted once, beside each instance, until the last instance goes. A batch
    labelled all but one item so stays counted whole, and the oldest batch gives way
    whole to a newer one."""
    _, many, _ = _group(kind)
    assert all(a.base is not None for x in many for a in _arrays(x))
    data = [b"%d" % t * 20 for t in range(len(many))]
    entries = sum(len(d) + live_model.KEPT_ENTRY for d in data)
    kept = live_model.Kept(1 << 30)
    for d, x in zip(data, many, strict=True):
        kept.put(d, x)
    shared = kept.held - entries  # the batch's arrays
    assert shared >= sum(a.nbytes for x in many for a in _arrays(x))
    for d, x in zip(data[:-1], many[:-1], strict=True):
        assert kept.take(d) is x  # the instance itself, not a copy
    assert kept.held == len(data[-1]) + live_model.KEPT_ENTRY + shared
    assert kept.take(data[-1]) is many[-1] and kept.held == 0
    # room for one batch: a second one's instances push the first's out, all of them
    kept = live_model.Kept(entries + shared)
    _, newer, _ = _group(kind)
    for d, x in zip(data, many, strict=True):
        kept.put(d, x)
    later = [b"n" + d[1:] for d in data]  # as long
    for d, x in zip(later, newer, strict=True):
        kept.put(d, x)
        assert kept.held <= kept.most
    assert all(kept.take(d) is None for d in data)
    assert all(kept.take(d) is x for d, x in zip(later, newer, strict=True))


@pytest.mark.parametrize("kind", ["experts", "attributes"])
def test_instances_put_together_are_counted_as_put_one_by_one(kind: str) -> None:
    """A group's instances are put together, their buffers found once for all: two
    batches' instances interleaved, and one over arrays of its own, are counted as put
    one at a time, at every take, until nothing is held."""
    _, many, alone = _group(kind)
    _, newer, _ = _group(kind)
    xs = [x for pair in zip(many, newer, strict=True) for x in pair] + [alone]
    data = [b"%d." % t * 8 for t in range(len(xs))]
    apart, together = live_model.Kept(1 << 30), live_model.Kept(1 << 30)
    for d, x in zip(data, xs, strict=True):
        apart.put(d, x)
    together.put_many(zip(data, xs, strict=True))
    assert together.held == apart.held and len(together) == len(apart) == len(xs)
    order = np.random.default_rng(5).permutation(len(xs))
    for i in order:
        assert together.take(data[i]) is apart.take(data[i]) is xs[i]
        assert together.held == apart.held
    assert together.held == 0


@pytest.mark.parametrize("kind", ["experts", "attributes"])
def test_a_group_larger_than_the_bound_keeps_its_newest_as_one_by_one_would(kind: str) -> None:
    """Where a group's instances do not all fit, those put first give way to those put
    later, within the one call: the same instances are held, counted the same, as when
    they are put one at a time, and the group's arrays stay counted until its last
    instance is taken."""
    _, many, _ = _group(kind)
    data = [b"%03d" % t * 8 for t in range(len(many))]  # all as long
    probe = live_model.Kept(1 << 30)
    probe.put(data[0], many[0])
    shared = probe.held - len(data[0]) - live_model.KEPT_ENTRY
    most = shared + 10 * (len(data[0]) + live_model.KEPT_ENTRY)  # the arrays and ten entries
    apart, together = live_model.Kept(most), live_model.Kept(most)
    for d, x in zip(data, many, strict=True):
        apart.put(d, x)
    together.put_many(zip(data, many, strict=True))
    assert len(together) == len(apart) == 10
    assert together.held == apart.held == most
    assert all(together.take(d) is None for d in data[:-10])
    for d, x in zip(data[-10:], many[-10:], strict=True):
        assert together.take(d) is apart.take(d) is x
        assert together.held == apart.held
    assert together.held == 0
    # one too large to be held beside the arrays pushes out the group's others and then
    # itself; the next are counted with the arrays again
    sizes = [24, 24, most - shared + 8, 24, 24, 24]
    data = [bytes([t]) * n for t, n in enumerate(sizes)]
    apart, together = live_model.Kept(most), live_model.Kept(most)
    for d, x in zip(data, many, strict=False):
        apart.put(d, x)
    together.put_many(zip(data, many, strict=False))
    assert len(together) == len(apart) == 3
    assert together.held == apart.held == shared + 3 * (24 + live_model.KEPT_ENTRY)


@pytest.mark.parametrize("kind", ["experts", "attributes"])
def test_an_instance_whose_batch_would_not_fit_is_kept_over_arrays_of_its_own(kind: str) -> None:
    """Where the batch's arrays alone exceed the bound, one of its instances is held
    over copies of its own, read-only and equal, each over memory of its own size."""
    _, many, alone = _group(kind)
    x = many[7]
    slots = [n for n in x.__slots__ if isinstance(getattr(x, n), np.ndarray)]
    assert all(getattr(x, n).base is not None for n in slots)
    own = sum(a.nbytes for a in _arrays(x))
    kept = live_model.Kept(len(b"seven") + live_model.KEPT_ENTRY + own)
    kept.put(b"seven", x)
    assert kept.held == kept.most
    got = kept.take(b"seven")
    assert type(got) is type(x) and got is not x
    for name in x.__slots__:
        a, b = getattr(got, name), getattr(x, name)
        if name == "source":  # a row of the batch; the copy is not
            assert b is not None and a is None
            continue
        if name not in slots:
            assert a == b
            continue
        owner = a if a.base is None else a.base
        assert memoryview(owner).nbytes == a.nbytes and not np.shares_memory(a, b)
        assert not a.flags.writeable
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    assert all(getattr(alone, n).base is None for n in slots)  # arrays of its own:
    kept = live_model.Kept(1 << 20)
    kept.put(b"alone", alone)  # held as it is
    assert kept.take(b"alone") is alone and kept.held == 0


def test_a_kept_instance_the_model_cannot_take_is_refused_as_its_decoding_is() -> None:
    """An instance held for its bytes is taken only where the decoded one would be: one
    voting with an expert the model does not have is quarantined either way."""
    grown = LiveModel("m", "inc", FUSION)
    grown.take_change(1, orjson.dumps({"experts": {"add": ["e3"]}}))
    fits = grown.encode({"experts": {"e0": "a", "e1": "c"}})
    beyond = grown.encode({"experts": {"e3": "b", "e0": "a"}})
    log = [
        (b"%d-0" % (t + 1), [b"k", b"n", b"x", encode_instance(x), b"y", b"1"])
        for t, x in enumerate([fits, beyond, fits])
    ]
    held = {encode_instance(x): x for x in (fits, beyond)}
    taken: list[bytes] = []

    def known(data: bytes) -> Any:
        taken.append(data)
        return held.get(data)

    with_known, decoding = LiveModel("m", "inc", FUSION), LiveModel("m", "inc", FUSION)
    with_known.apply(log, known)
    decoding.apply(log)
    assert taken == [entry[1][3] for entry in log]  # every instance asked for
    assert with_known.quarantined == decoding.quarantined == 1
    assert orjson.dumps(with_known.learner.export_state()) == orjson.dumps(
        decoding.learner.export_state()
    )


def test_own_runs_that_follow_each_other_are_replayed_as_one() -> None:
    """A batch's keyed requests, appended one after another, are replayed as one run,
    each entry under its request's key; a run after a gap (another worker's entries)
    starts another."""
    x = LiveModel("m", "inc", CONFIG).encode({"features": [1, 0, 1, 0]})
    own = [(5, [(x, 0)], "a"), (6, [(x, 1), (x, 0)], "b"), (8, [(x, 1)], ""), (11, [(x, 0)], "c")]
    assert replicas._runs(own) == [
        (5, [(x, 0), (x, 1), (x, 0), (x, 1)], ["a", "b", "b", ""]),
        (11, [(x, 0)], ["c"]),
    ]
