"""The backtest's replay over a log made here, entry by entry, by a model that served
predictions and took their labels later: what it counts, what it reads ahead for, and
what it does at a reset."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.service.live_model import LiveModel
from app.service.replay import Replay, Run
from storage.codec import encode_instance

LABELS = ["a", "b", "c"]
CONFIG: dict[str, Any] = {
    "labels": LABELS,
    "input": {"experts": {"expert_names": ["e0", "e1", "e2"]}},
    "learner": {"kind": "committee", "alpha": 1.5},
    "label_ttl": 60.0,
}
OTHER = {"kind": "multiclass-winnow", "alpha": 1.3}


def _model(spec: dict[str, Any] | None = None) -> LiveModel:
    return LiveModel("m", "1", {**CONFIG, "learner": spec or CONFIG["learner"]})


def _log(seed: int, n: int, far: int) -> tuple[list[tuple[bytes, list[bytes]]], list[int]]:
    """A model's log of ``n`` entries: learned trials, and labels of predictions served
    up to ``far`` versions earlier; and the gap (seq - 1 - served version) of each label."""
    rng = np.random.default_rng(seed)
    ref = _model()
    log: list[tuple[bytes, list[bytes]]] = []
    served: list[tuple[int, Any, int]] = []  # version, instance, prediction
    gaps = []
    while len(log) < n:
        seq = len(log) + 1
        y = int(rng.integers(3))
        votes = {
            e: LABELS[y if rng.random() < p else int(rng.integers(3))]
            for e, p in (("e0", 0.8), ("e1", 0.6), ("e2", 0.5))
        }
        x = ref.encode({"experts": votes})
        overdue = [s for s in served if seq - 1 - s[0] >= far]
        if not overdue and rng.random() < 0.4:  # served now, labelled later
            served.append((seq - 1, x, ref.space.class_of(ref.learner.predict(x))))
            continue
        if overdue or (served and rng.random() < 0.5):
            at, x, p = overdue[0] if overdue else served[int(rng.integers(len(served)))]
            served.remove((at, x, p))
            fields = [b"k", b"l", b"t", b"t%d" % seq, b"x", encode_instance(x)]
            fields += [b"y", b"%d" % y, b"p", b"%d" % p, b"v", b"%d" % at, b"w", b"1"]
            gaps.append(seq - 1 - at)
        else:
            fields = [b"k", b"n", b"x", encode_instance(x), b"y", b"%d" % y, b"w", b"1"]
        ref.learner.trial(x, ref.labels[y])
        log.append((b"%d-0" % seq, fields))
    return log, gaps


def _replay(
    log: list[tuple[bytes, list[bytes]]],
    specs: list[dict[str, Any]],
    look_ahead: int,
    step: int,
    batch: bool = True,
    counted_from: int = 0,
) -> Replay:
    runs = [Run(CONFIG["learner"], _model(), served=True)]
    runs += [Run(spec, _model(spec)) for spec in specs]
    replay = Replay(runs, counted_from, len(log), 10, look_ahead, batch=batch)
    for i in range(0, len(log), step):
        replay.take(log[i : i + step])
        assert replay.advance(final=i + step >= len(log)) is None
    return replay


@pytest.mark.parametrize("step", [1, 7, 10_000])
def test_the_models_own_learner_judged_where_it_served_makes_its_mistakes(step: int) -> None:
    log, gaps = _log(seed=1, n=600, far=30)
    assert len(gaps) > 100 and max(gaps) > 20
    replay = _replay(log, [CONFIG["learner"], OTHER], look_ahead=40, step=step)
    model, own, other = replay.runs
    assert model.trials == own.trials == other.trials == 600
    assert (own.mistakes, own.late, own.curve) == (model.mistakes, 0, model.curve)
    assert other.late == 0 and other.curve != model.curve  # (another learner)
    assert len(model.curve) == 10 and model.curve[-1] == (600, model.mistakes)


def test_a_label_further_back_than_the_read_ahead_is_judged_at_replay_and_counted_late() -> None:
    log, gaps = _log(seed=2, n=600, far=30)
    look_ahead = 5
    replay = _replay(log, [CONFIG["learner"]], look_ahead, step=1)
    model, own = replay.runs
    # fed one entry at a time, the replay reads exactly look_ahead entries ahead
    assert own.late == sum(g > look_ahead for g in gaps) > 0
    assert own.trials == model.trials
    # all at once, nothing is late
    assert _replay(log, [CONFIG["learner"]], look_ahead, step=10_000).runs[1].late == 0


def test_an_entry_that_does_not_decode_is_skipped_by_every_run_and_the_rest_learned() -> None:
    log, _ = _log(seed=3, n=400, far=10)
    # the instances of every 37th entry no longer decode
    bad = set(range(5, 400, 37))
    for i in bad:
        fields = list(log[i][1])
        fields[fields.index(b"x") + 1] = b"not an instance"
        log[i] = (log[i][0], fields)
    # entries decoded together, a few at a time or all at once, skip them alike
    got = [_replay(log, [CONFIG["learner"], OTHER], 40, step).runs for step in (1, 10_000)]
    for runs in got:
        assert [r.trials for r in runs] == [400 - len(bad)] * 3
        assert all(r.late == 0 and r.stopped is None for r in runs)
    assert [(r.mistakes, r.curve) for r in got[0]] == [(r.mistakes, r.curve) for r in got[1]]
    # and the others learned: a candidate like the model makes its mistakes but a few
    assert got[1][1].mistakes > 0 and abs(got[1][1].mistakes - got[1][0].mistakes) <= len(bad)


def test_at_a_reset_the_model_is_rebuilt_and_the_candidates_learn_on() -> None:
    log, _ = _log(seed=3, n=200, far=5)
    reset = (b"201-0", [b"k", b"r", b"w", b"2"])
    tail, _ = _log(seed=4, n=50, far=0)
    tail = [(b"%d-0" % (201 + i + 1), f) for i, (_, f) in enumerate(tail)]
    log = [*log, reset, *tail]
    runs = [Run(CONFIG["learner"], _model(), served=True), Run(OTHER, _model(OTHER))]
    replay = Replay(runs, 0, len(log), 10, look_ahead=10)
    replay.take(log)
    assert replay.advance(final=True) == 201  # the model's state after it must be read
    fresh = _model()
    fresh.version = 201
    replay.reset(201, fresh)
    assert replay.advance(final=True) is None
    model, other = replay.runs
    assert model.model is fresh and model.model.version == other.model.version == 251
    assert replay.resets == [201] and model.trials == other.trials == 250
    # a model that cannot be rebuilt there stops; the candidates go on
    runs = [Run(CONFIG["learner"], _model(), served=True), Run(OTHER, _model(OTHER))]
    replay = Replay(runs, 0, len(log), 10)
    replay.take(log)
    assert replay.advance(final=True) == 201
    replay.reset(201, None)
    assert replay.advance(final=True) is None
    model, other = replay.runs
    assert model.stopped == {"version": 201, "reason": "its state after this reset is gone"}
    assert (model.trials, other.trials) == (200, 250)


def test_a_candidate_that_cannot_take_a_change_stops_there() -> None:
    log, _ = _log(seed=5, n=50, far=3)
    change = orjson.dumps({"experts": {"add": ["e3"]}})
    log.append((b"51-0", [b"k", b"c", b"c", change, b"w", b"3"]))
    more, _ = _log(seed=6, n=10, far=0)
    log += [(b"%d-0" % (52 + i), f) for i, (_, f) in enumerate(more)]
    fixed = {"kind": "multiclass-winnow", "init_weights": [1.0] * _model().size}
    runs = [Run(CONFIG["learner"], _model(), served=True), Run(fixed, _model(fixed))]
    replay = Replay(runs, 0, len(log), 10)
    replay.take(log)
    assert replay.advance(final=True) is None
    model, other = replay.runs
    assert model.model.version == 61 and model.model.size > _model().size
    assert model.trials == 60 and other.trials == 50
    assert other.stopped is not None and other.stopped["version"] == 51
    assert "init_weights" in other.stopped["reason"]


#: kinds with a compiled run of trials, one that refuses updates, and one without (a
#: wrapper: one by one)
KINDS = [
    CONFIG["learner"],
    OTHER,
    {"kind": "weighted-majority", "beta": 0.4, "brier": 1.0},
    {"kind": "fusion"},
    {"kind": "multiclass-winnow", "alpha": 1e305},
    {"kind": "averaging", "learner": {"kind": "committee"}},
]


def _results(replay: Replay) -> list[Any]:
    """Everything a replay counts, and each run's learner state."""
    return [(r.result(), r.model.version, r.model.learner.export_state()) for r in replay.runs]


@pytest.mark.parametrize("step", [1, 7, 300, 10_000])
@pytest.mark.parametrize("counted_from", [0, 123])
def test_runs_learned_together_count_what_one_by_one_counts(step: int, counted_from: int) -> None:
    log, _ = _log(seed=11, n=700, far=30)
    for i in range(9, 700, 97):  # and a few entries that no longer decode
        fields = list(log[i][1])
        fields[fields.index(b"x") + 1] = b"not an instance"
        log[i] = (log[i][0], fields)
    got = [
        _results(_replay(log, KINDS, 40, step, batch=batch, counted_from=counted_from))
        for batch in (True, False)
    ]
    assert got[0] == got[1]
    refusing = got[0][5][0]
    assert refusing["trials"] > 0 and refusing["stopped"] is None


def test_runs_learned_together_meet_resets_and_changes_as_one_by_one() -> None:
    log, _ = _log(seed=12, n=150, far=5)
    log.append((b"151-0", [b"k", b"r", b"w", b"2"]))
    more, _ = _log(seed=13, n=60, far=4)
    log += [(b"%d-0" % (152 + i), f) for i, (_, f) in enumerate(more)]
    change = orjson.dumps({"experts": {"add": ["e3"]}})
    log.append((b"212-0", [b"k", b"c", b"c", change, b"w", b"3"]))
    tail, _ = _log(seed=14, n=40, far=0)
    log += [(b"%d-0" % (213 + i), f) for i, (_, f) in enumerate(tail)]
    fixed = {"kind": "multiclass-winnow", "init_weights": [1.0] * _model().size}

    def replay(batch: bool) -> list[Any]:
        runs = [Run(CONFIG["learner"], _model(), served=True)]
        runs += [Run(spec, _model(spec)) for spec in [*KINDS[1:], fixed]]
        replay = Replay(runs, 20, len(log), 7, look_ahead=10, batch=batch)
        replay.take(log)
        assert replay.advance(final=True) == 151
        fresh = _model()
        fresh.version = 151
        replay.reset(151, fresh)
        assert replay.advance(final=True) is None
        return _results(replay)

    together, alone = replay(True), replay(False)
    assert together == alone
    assert together[-1][0]["stopped"]["version"] == 212  # (the fixed one cannot grow)


def _grown_log(seed: int, n: int, far: int, change_at: int, corrupt: int) -> list[Any]:
    """A log of ``n`` entries whose experts abstain at random, a change adding an expert
    at ``change_at`` (after which it votes), labels up to ``far`` versions late, and
    every ``corrupt``-th instance no longer decoding."""
    rng = np.random.default_rng(seed)
    ref = _model()
    names = ["e0", "e1", "e2"]
    log: list[tuple[bytes, list[bytes]]] = []
    served: list[tuple[int, Any, int]] = []
    while len(log) < n:
        seq = len(log) + 1
        if seq == change_at:
            change = orjson.dumps({"experts": {"add": ["e3"]}})
            assert ref.take_change(seq, change) is None
            names.append("e3")
            log.append((b"%d-0" % seq, [b"k", b"c", b"c", change, b"w", b"3"]))
            continue
        y = int(rng.integers(3))
        votes = {e: LABELS[y if rng.random() < 0.7 else int(rng.integers(3))] for e in names}
        x = ref.encode({"experts": {e: v for e, v in votes.items() if rng.random() < 0.8}})
        if rng.random() < 0.3:
            served.append((seq - 1, x, ref.space.class_of(ref.learner.predict(x))))
            continue
        if served and (rng.random() < 0.5 or seq - 1 - served[0][0] >= far):
            at, x, p = served.pop(0)
            fields = [b"k", b"l", b"t", b"t%d" % seq, b"x", encode_instance(x)]
            fields += [b"y", b"%d" % y, b"p", b"%d" % p, b"v", b"%d" % at, b"w", b"1"]
        else:
            fields = [b"k", b"n", b"x", encode_instance(x), b"y", b"%d" % y, b"w", b"1"]
        ref.learner.trial(x, ref.labels[y])
        if corrupt and seq % corrupt == 0:
            fields[fields.index(b"x") + 1] = b"E\x00"
        log.append((b"%d-0" % seq, fields))
    return log


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 300),
    far=st.integers(0, 40),
    change_at=st.integers(0, 300),
    corrupt=st.sampled_from([0, 0, 13, 61]),
    look_ahead=st.integers(1, 64),
    step=st.integers(1, 400),
    counted_from=st.integers(0, 100),
    points=st.integers(1, 20),
    twice=st.sampled_from([0, 0, 17]),
)
def test_the_batched_replay_counts_what_the_entry_by_entry_replay_counts(
    seed: int,
    n: int,
    far: int,
    change_at: int,
    corrupt: int,
    look_ahead: int,
    step: int,
    counted_from: int,
    points: int,
    twice: int,
) -> None:
    # as the server replies: with every ``twice``-th entry holding a field twice (the
    # kind, made a reset; the label; the stamp), which read_log reads as a dict keeps it
    replies = _grown_log(seed, n, far, change_at, corrupt)
    for t in range(twice - 1, n, twice or n + 1):
        name = (b"k", b"y", b"w")[t % 3]
        replies[t] = (replies[t][0], [*replies[t][1], name, b"r" if name == b"k" else b"2"])
    read = []
    for entry_id, fields in replies:
        it = iter(fields)
        read.append((entry_id, [v for kv in dict(zip(it, it, strict=True)).items() for v in kv]))

    def replay(batch: bool) -> list[Any]:
        runs = [Run(CONFIG["learner"], _model(), served=True)]
        runs += [Run(spec, _model(spec)) for spec in KINDS[1:]]
        replay = Replay(runs, counted_from, n, points, look_ahead, batch=batch)
        log = replies if batch else read
        for i in range(0, n, step):
            replay.take(log[i : i + step], replies=batch)
            while (reset := replay.advance(final=i + step >= n)) is not None:
                replay.reset(reset, None)  # (the model's state there is not kept)
        return [replay.resets, *_results(replay)]

    assert replay(True) == replay(False)
