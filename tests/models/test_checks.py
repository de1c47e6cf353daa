"""The common check suite: every learner in conftest.CASES must pass every check here.

Like River's ``river/checks``: clone, state round trip, no mutation of the caller's input,
seeded determinism, features appearing and vanishing, bad input rejected, counters, snapshots,
predict == arg-max of scores, and learn_many == trial-by-trial learn.
"""

from __future__ import annotations

import base64
import copy
import json
import random
import re
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

from models import registry
from models.core.instance import AttributeBatch, Attributes, Experts, InvalidInstance
from models.core.learner import Learner, Outcome, UnknownLabel
from models.core.state import encode_array
from models.kernels.common import argmax_first

TRAIN, HELD_OUT, MORE = 11, 22, 33  # stream seeds


def _state(learner: Learner) -> str:
    """The whole state as canonical JSON text: equal text means equal state."""
    return json.dumps(learner.export_state(), sort_keys=True)


def _trained(case: Any, n: int = 120, seed: int = TRAIN) -> Learner:
    learner = case.build()
    for x, y in case.stream(n, seed):
        learner.learn(x, y)
    return learner


def _outputs(learner: Learner, xs: list[Any]) -> tuple[list[Any], list[np.ndarray]]:
    return [learner.predict(x) for x in xs], [learner.scores(x) for x in xs]


def _assert_same_outputs(a: Learner, b: Learner, xs: list[Any]) -> None:
    pa, sa = _outputs(a, xs)
    pb, sb = _outputs(b, xs)
    assert pa == pb
    for t, (u, v) in enumerate(zip(sa, sb, strict=True)):
        np.testing.assert_array_equal(u, v, err_msg=f"scores of held-out instance {t}")


def test_every_kind_has_a_case(all_cases: list[Any]) -> None:
    assert {c.kind for c in all_cases} == set(registry.KINDS)


# -- clone -------------------------------------------------------------------------------


def test_clone_is_untrained_with_equal_spec(case: Any) -> None:
    learner = _trained(case)
    assert learner.trials_ > 0
    before = _state(learner)
    clone = learner.clone()
    assert clone is not learner
    assert type(clone) is type(learner)
    assert clone.spec() == learner.spec() == case.build().spec()
    assert clone.counters() == {"trials": 0, "mistakes": 0, "updates": 0, "version": 0}
    assert _state(clone) == _state(case.build())
    for x, y in case.stream(40, MORE):  # training the clone leaves the original alone
        clone.learn(x, y)
    assert _state(learner) == before


# -- state round trip -----------------------------------------------------------------------


def test_state_round_trip_is_exact(case: Any) -> None:
    learner = _trained(case)
    doc = json.loads(json.dumps(learner.export_state()))
    copy_ = registry.from_state(doc)
    assert type(copy_) is type(learner)
    assert copy_.spec() == learner.spec()
    assert copy_.counters() == learner.counters()
    np.testing.assert_array_equal(copy_.weights(), learner.weights())  # type: ignore[attr-defined]
    assert _state(copy_) == _state(learner)
    held_out = [x for x, _ in case.stream(60, HELD_OUT)]
    _assert_same_outputs(learner, copy_, held_out)
    for t, (x, y) in enumerate(case.stream(80, MORE)):  # both keep learning identically
        assert learner.learn(x, y) == copy_.learn(x, y), f"trial {t} after the round trip"
    assert _state(copy_) == _state(learner)
    _assert_same_outputs(learner, copy_, held_out)


def test_import_state_into_a_fresh_learner(case: Any) -> None:
    learner = _trained(case)
    other = case.build()
    other.import_state(json.loads(json.dumps(learner.export_state())))
    assert _state(other) == _state(learner)


# -- the caller's input is never mutated ---------------------------------------------------


def _forms(case: Any, x: Any) -> list[Any]:
    """The same instance in every form a caller may pass."""
    d = case.dense(x)
    if case.attributes:
        idx = np.flatnonzero(d)
        return [d, d.tolist(), {int(i): float(d[i]) for i in idx}, Attributes(idx, d[idx])]
    e, c = np.nonzero(d)
    return [d, d.tolist(), Experts(e, c, d[e, c])]


def _snapshot_of(obj: Any) -> Any:
    """A deep copy that also records numpy arrays' flags."""
    if isinstance(obj, np.ndarray):
        return ("ndarray", obj.copy(), obj.dtype, obj.flags.writeable)
    if isinstance(obj, Attributes):
        return ("attributes", _snapshot_of(obj.indices), _snapshot_of(obj.values))
    if isinstance(obj, Experts):
        return ("experts", *(_snapshot_of(a) for a in (obj.expert, obj.cls, obj.value)))
    return copy.deepcopy(obj)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) and a and a[0] == "ndarray":
        return (
            isinstance(b, tuple)
            and b[0] == "ndarray"
            and np.array_equal(a[1], b[1])
            and a[2:] == b[2:]
        )
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def test_input_not_mutated(case: Any) -> None:
    learner = _trained(case, n=30)
    spec, labels = copy.deepcopy(case.spec), list(case.labels)
    registry.build(spec, labels=labels, size=case.size)
    assert spec == case.spec and labels == list(case.labels)
    for x, y in case.stream(24, HELD_OUT):
        for form in _forms(case, x):
            before = _snapshot_of(form)
            learner.scores(form)
            learner.predict(form)
            learner.snapshot().predict(form)
            learner.learn(form, y)
            assert _same(before, _snapshot_of(form)), f"{type(form).__name__} was changed"
    xs = [x for x, _ in case.stream(10, MORE)]
    ys = [y for _, y in case.stream(10, MORE)]
    before = [_snapshot_of(x) for x in xs], list(ys)
    learner.learn_many(xs, ys)
    assert all(map(_same, before[0], [_snapshot_of(x) for x in xs])) and before[1] == ys


# -- determinism -------------------------------------------------------------------------------


def test_seeded_determinism(case: Any) -> None:
    """The same stream gives the same results, whatever the global random state."""
    runs = []
    for seed in (1, 2):
        random.seed(seed)
        np.random.seed(seed)  # noqa: NPY002 - a learner must not draw from the global state
        learner = case.build()
        outcomes = [learner.learn(x, y) for x, y in case.stream(150, TRAIN)]
        runs.append((outcomes, _state(learner)))
    assert runs[0] == runs[1]
    outcomes = runs[0][0]
    assert any(o.mistake for o in outcomes) and not all(o.mistake for o in outcomes)


# -- features appearing and vanishing -------------------------------------------------------


def test_sparse_forms_learn_like_dense(case: Any) -> None:
    """Instances whose active set changes, in mixed sparse forms, learn as their dense forms."""
    mixed, dense = case.build(), case.build()
    for t, (x, y) in enumerate(case.stream(150, TRAIN)):
        assert mixed.predict(x) == dense.predict(case.dense(x)), f"trial {t}"
        assert mixed.learn(x, y) == dense.learn(case.dense(x), y), f"trial {t}"
    assert _state(mixed) == _state(dense)


def test_features_appearing_and_vanishing(case: Any) -> None:
    learner = case.build()
    initial = learner.weights()  # type: ignore[attr-defined]
    n = case.size
    early, never = np.arange(n // 2), np.arange(n - 2, n)  # the last two never appear
    stream = case.stream(200, TRAIN)

    def restrict(x: Any, keep: np.ndarray) -> np.ndarray:
        d = case.dense(x)
        mask = np.zeros(n, dtype=bool)
        mask[keep] = True
        d[~mask] = 0.0
        return d

    for x, y in stream[:100]:  # only the first half of the features are ever active
        learner.learn(restrict(x, early), y)
    mid = learner.weights()  # type: ignore[attr-defined]
    for x, y in stream[100:]:  # the early features vanish, the others appear
        learner.learn(restrict(x, np.arange(n // 2, n - 2)), y)
    final = learner.weights()  # type: ignore[attr-defined]
    assert np.all(final[never] == final[never][0]), "never-active weights drifted apart"
    if case.local_updates:
        np.testing.assert_array_equal(mid[n // 2 :], initial[n // 2 :])
        np.testing.assert_array_equal(final[never], initial[never])
        np.testing.assert_array_equal(final[early], mid[early])
    assert learner.updates_ > 0


def test_empty_instances(case: Any) -> None:
    learner = _trained(case, n=40)
    empties: list[Any] = (
        [{}, [], np.zeros(case.size), Attributes([], [])]
        if case.attributes
        else [np.zeros((case.size, len(case.labels))), np.zeros((0, 0)), Experts([], [], [])]
    )
    for x in empties:
        s = learner.scores(x)
        assert s.shape == (len(case.labels),) and np.isfinite(s).all()
        assert learner.predict(x) in case.labels
        out = learner.learn(x, case.labels[-1])
        assert isinstance(out, Outcome)
        assert learner.snapshot().predict(x) == learner.predict(x)
    assert learner.trials_ == 40 + len(empties)


# -- bad input is rejected ------------------------------------------------------------------


def _bad_instances(case: Any) -> dict[str, Any]:
    n = case.size
    if case.attributes:
        bad = {
            "nan": [0.5, np.nan],
            "inf": {1: np.inf},
            "-inf": np.array([-np.inf, 1.0]),
            "index == size": {n: 1.0},
            "index > size": {n + 5: 1.0},
            "dense too long": np.ones(n + 1),
            "negative index": {-1: 1.0},
            "2-d": np.ones((2, 2)),
            "string": "1010",
            "none": None,
            "experts for attributes": Experts.one_hot([0, 1]),
        }
        if not case.any_reals:
            bad.update({"value > 1": {0: 1.5}, "value < 0": [0.0, -0.5]})
        return bad
    k = len(case.labels)
    nan = np.zeros((n, k))
    nan[1, 2] = np.nan
    inf = np.zeros((n, k))
    inf[0, 0] = np.inf
    too_many_classes = np.zeros((n, k + 1))
    too_many_classes[0, k] = 1.0
    bad = {
        "nan": nan,
        "inf": inf,
        "expert == size": np.eye(n + 1, k),
        "expert > size (triples)": Experts([n + 3], [0], [1.0]),
        "class == k": too_many_classes,
        "1-d": np.ones(k),
        "attributes for experts": Attributes([0], [1.0]),
        "none": None,
    }
    if not case.any_reals:
        bad.update({"vote > 1": np.full((2, k), 1.5), "vote < 0": -np.eye(2, k)})
    return bad


def test_bad_input_rejected(case: Any) -> None:
    learner = _trained(case, n=30)
    before = _state(learner)
    for name, x in _bad_instances(case).items():
        for call in (learner.scores, learner.predict, lambda x: learner.learn(x, case.labels[0])):
            with pytest.raises(InvalidInstance):
                call(x)
                pytest.fail(f"{name}: accepted")
    with pytest.raises(InvalidInstance, match="-1"):
        learner.learn({-1: 1.0} if case.attributes else Experts([-1], [0], [1.0]), case.labels[0])
    assert _state(learner) == before


def test_value_range(case: Any) -> None:
    learner = case.build()
    if case.attributes:
        x: Any = np.zeros(case.size)
        x[:3] = [-3.5, 7.0, 0.5]
    else:
        x = np.zeros((case.size, len(case.labels)))
        x[0, 0], x[1, 1], x[2, 0] = -3.5, 7.0, 0.5
    if case.any_reals:
        assert learner.predict(x) in case.labels
        learner.learn(x, case.labels[1])
        for xr, y in case.real_stream(50, TRAIN):
            learner.learn(xr, y)
        assert learner.trials_ == 51 and np.isfinite(learner.weights()).all()  # type: ignore[attr-defined]
    else:
        with pytest.raises(InvalidInstance, match=r"\[0, 1\]"):
            learner.learn(x, case.labels[1])
        assert learner.trials_ == 0


def test_unknown_label_rejected(case: Any) -> None:
    learner = _trained(case, n=30)
    before = _state(learner)
    x = case.stream(1, HELD_OUT)[0][0]
    for label in ("nope", 99, None, ("a",), ["unhashable"]):
        with pytest.raises(UnknownLabel) as info:
            learner.learn(x, label)
        assert repr(label) in str(info.value)
        with pytest.raises(UnknownLabel):
            learner.learn_many([x], [label])
    assert _state(learner) == before
    assert issubclass(UnknownLabel, InvalidInstance)


# -- counters and versions --------------------------------------------------------------------


def test_counters(case: Any) -> None:
    """trials, mistakes and updates count the real trials; version moves on every update.

    A basic learner's hypothesis changes only when it updates, so its version equals its
    updates. A wrapper's predictor may also change between its own updates (internal
    recycling trials, an average that moves every trial), so its version may move more.
    """
    learner = case.build()
    mistakes = updates = 0
    for t, (x, y) in enumerate(case.stream(150, TRAIN)):
        predicted = learner.predict(x)
        version = learner.version_
        out = learner.learn(x, y)
        assert out.mistake == (predicted != y), f"trial {t}: learn disagrees with predict"
        if out.mistake and not out.updated and not case.predicts_apart:
            d = case.dense(x)  # only when the trial has nothing to learn from
            cy, cp = case.labels.index(y), case.labels.index(predicted)
            assert not d.any() if case.attributes else np.array_equal(d[:, cy], d[:, cp]), (
                f"trial {t}: a mistake on an informative instance did not update"
            )
        moved = learner.version_ - version
        if case.wrapper:
            assert moved >= int(out.updated), f"trial {t}"
        else:
            assert moved == int(out.updated), f"trial {t}"
        mistakes += out.mistake
        updates += out.updated
        counters = learner.counters()
        assert (counters["trials"], counters["mistakes"], counters["updates"]) == (
            t + 1,
            mistakes,
            updates,
        )
        assert counters["version"] >= updates if case.wrapper else counters["version"] == updates
    assert 0 < mistakes < 150


# -- snapshots ----------------------------------------------------------------------------------


def test_snapshot(case: Any) -> None:
    learner = _trained(case)
    snap = learner.snapshot()
    assert tuple(snap.labels) == tuple(learner.labels)
    with pytest.raises(ValueError):
        snap.weights[0] = 123.0  # type: ignore[attr-defined]
    held_out = [x for x, _ in case.stream(80, HELD_OUT)]
    predictions, scores = _outputs(learner, held_out)
    assert [snap.predict(x) for x in held_out] == predictions
    for t, x in enumerate(held_out):
        np.testing.assert_allclose(snap.scores(x), scores[t], rtol=1e-12, atol=1e-300)
    weights = np.array(snap.weights)  # type: ignore[attr-defined]
    for x, y in case.stream(100, MORE):
        learner.learn(x, y)
    assert learner.updates_ > 0
    assert [snap.predict(x) for x in held_out] == predictions
    np.testing.assert_array_equal(snap.weights, weights)  # type: ignore[attr-defined]


def test_snapshot_rejects_what_the_learner_rejects(case: Any) -> None:
    """A snapshot must not index past its weights (numba does not bounds-check)."""
    snap = _trained(case, n=20).snapshot()
    n = case.size
    x = {n: 1.0} if case.attributes else Experts([n], [0], [1.0])
    with pytest.raises(InvalidInstance):
        snap.scores(x)
    with pytest.raises(InvalidInstance):
        snap.predict(x)


def test_snapshot_rejects_class_beyond_its_labels(all_cases: list[Any]) -> None:
    """Run in a subprocess: an out-of-range class index writes past a numba array."""
    cases = [(c.id, c.spec, c.labels, c.size) for c in all_cases if not c.attributes]
    code = f"""
        from models import registry
        from models.core.instance import Experts, InvalidInstance
        from models.warm import place_cache
        place_cache()
        for name, spec, labels, size in {cases!r}:
            snap = registry.build(spec, labels=labels, size=size).snapshot()
            try:
                snap.scores(Experts([0], [len(labels)], [1.0]))
            except InvalidInstance:
                continue
            print(name)
    """
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [], "snapshots accepting a class beyond their labels"


def _replace_array(doc: dict[str, Any], name: str, fn: Any) -> None:
    enc = doc["arrays"][name]
    arr = np.frombuffer(base64.b64decode(enc["data"]), dtype="<f8").reshape(enc["shape"]).copy()
    doc["arrays"][name] = encode_array(fn(arr))


def test_committee_snapshot_agrees_at_a_tie() -> None:
    """The learner predicts from raw weights r, its snapshot from r / sum(r): a tie in the
    raw scores (r0 + r1 == r2) must not become a win for the later class after division."""
    a, b = 0.48519097443163506, 0.9807371998012386
    c, total = a + b, a + b + (a + b)
    assert a / total + b / total != c / total  # the division breaks the tie
    learner = registry.build({"kind": "committee"}, labels=["x", "y"], size=3)
    doc = learner.export_state()
    _replace_array(doc, "r_", lambda r: np.array([a, b, c]))
    _replace_array(doc, "scalars_", lambda sc: np.r_[total, sc[1:]])  # sc[0] is sum(r)
    learner.import_state(doc)
    x = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]
    assert learner.predict(x) == "x"
    assert learner.snapshot().predict(x) == learner.predict(x)


# -- predict is the arg-max of the scores; decide gives both -----------------------------


def test_predict_is_argmax_of_scores(case: Any) -> None:
    learner = case.build()
    zero_margins = 0
    for x, y in case.stream(200, TRAIN):
        s = learner.scores(x)
        assert s.shape == (len(case.labels),) and np.isfinite(s).all()
        expected = case.labels[int(argmax_first(s))]
        if case.strict and s[0] == 0.0:
            zero_margins += 1
            expected = case.labels[1]  # a strict learner predicts the second label at margin 0
        assert learner.predict(x) == expected
        c, scores = learner.decide(x)
        assert case.labels[c] == expected
        np.testing.assert_array_equal(scores, s)
        learner.learn(x, y)
    if case.strict:
        assert zero_margins > 0, "the stream never reached a zero margin"


def test_decide_many_is_decide_of_each(case: Any) -> None:
    learner = case.build()
    stream = case.stream(200, TRAIN)
    for at in range(0, len(stream), 17):
        chunk = stream[at : at + 1 + at % 23]
        many = learner.decide_many([x for x, _ in chunk])
        assert len(many) == len(chunk)
        for (x, _), (c, s) in zip(chunk, many, strict=True):
            one_c, one_s = learner.decide(x)
            assert type(c) is int and c == one_c
            np.testing.assert_array_equal(s, one_s, strict=True)
        for x, y in stream[at : at + 17]:
            learner.learn(x, y)
    assert learner.decide_many([]) == []


# -- learn_many -----------------------------------------------------------------------------------


def test_learn_many_equals_learn(case: Any) -> None:
    stream = case.stream(150, TRAIN)
    one, many = case.build(), case.build()
    outcomes = [one.learn(x, y) for x, y in stream]
    mistakes, updates = many.learn_many([x for x, _ in stream], [y for _, y in stream])
    assert mistakes.dtype == bool and updates.dtype == bool
    assert mistakes.tolist() == [o.mistake for o in outcomes]
    assert updates.tolist() == [o.updated for o in outcomes]
    assert _state(many) == _state(one)
    empty = many.learn_many([], [])
    assert [a.size for a in empty] == [0, 0] and _state(many) == _state(one)
    if case.attributes:
        batch = AttributeBatch.from_instances([x for x, _ in stream])
        again = case.build()
        again.learn_many(batch, [y for _, y in stream])
        assert _state(again) == _state(one)


def test_learn_many_rejects_unequal_lengths_without_learning(case: Any) -> None:
    learner = case.build()
    stream = case.stream(5, TRAIN)
    with pytest.raises(InvalidInstance):
        learner.learn_many([x for x, _ in stream], [y for _, y in stream[:4]])
    assert learner.trials_ == 0 and _state(learner) == _state(case.build())


def test_binary_snapshot_agrees_near_a_zero_margin() -> None:
    """LinearHypothesis sums w.x with numpy's dot, the learners with their own loop; where
    the two round differently, a margin of exactly 0 for one is a tiny negative for the
    other and the snapshot predicts the other label."""
    rng = np.random.default_rng(0)
    learner = registry.build({"kind": "perceptron"}, labels=["pos", "neg"], size=16)
    template = learner.export_state()
    for _ in range(200):
        w = rng.random(16) - 0.5
        x = rng.choice([0.25, 0.3, 0.5, 1.0], size=16)
        w[-1] = -sum((w[:-1] * x[:-1]).tolist()) / x[-1]  # a tiny (often zero) margin
        doc = copy.deepcopy(template)
        doc["arrays"]["w_"] = encode_array(w)
        learner.import_state(doc)
        assert learner.snapshot().predict(x) == learner.predict(x), (w.tolist(), x.tolist())


# -- a failed trial leaves no trace --------------------------------------------------------------


def _far_apart(theta: float) -> Learner:
    """Balanced Winnow whose next promotion on [1, 1] pushes w+_0 past 2**900."""
    learner = registry.build(
        {"kind": "balanced-winnow", "alpha": 1e200, "theta": theta}, labels=[1, -1], size=2
    )
    doc = learner.export_state()
    doc["arrays"]["w_"] = encode_array(np.array([[1e250, 1e-250], [1e-260, 1e260]]))
    learner.import_state(doc)
    return learner


def test_balanced_winnow_overflow_with_a_threshold_leaves_the_state_unchanged() -> None:
    learner = _far_apart(theta=-0.5)
    before = _state(learner)
    with pytest.raises(OverflowError):
        learner.learn([1.0, 1.0], 1)
    assert _state(learner) == before
    registry.from_state(json.loads(before))


def test_balanced_winnow_shifts_its_weights_at_threshold_zero() -> None:
    """With threshold 0 only ratios matter: the weights are divided by 2**600, exactly."""
    learner = _far_apart(theta=0.0)
    before = learner.w_.copy()
    assert learner.learn([1.0, 1.0], 1) == (True, True)
    assert learner.scalars_.tolist() == [600.0, 1.0] and learner.linear_shift() == 600.0
    factor = 2.0**-600
    expected = np.array(
        [
            [before[0, 0] * factor * 1e200, before[0, 1] * factor * 1e-200],
            [before[1, 0] * factor * 1e200, before[1, 1] * factor * 1e-200],
        ]
    )
    np.testing.assert_allclose(learner.w_, expected, rtol=1e-12)  # alpha = exp(ln 1e200)
    # a shifted copy of any state predicts exactly as the unshifted one
    probes = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, 1.0], [1.0, 0.25]]
    plain = _far_apart(theta=0.0)
    doc = plain.export_state()
    doc["arrays"]["w_"] = encode_array(before * factor)
    doc["arrays"]["scalars_"] = encode_array(np.array([600.0, 1.0]))
    shifted = registry.from_state(json.loads(json.dumps(doc)))
    assert [shifted.predict(x) for x in probes] == [plain.predict(x) for x in probes]


def test_balanced_winnow_learn_many_overflow_matches_learn() -> None:
    xs, ys = [[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]], [1, 1, -1]
    one = _far_apart(theta=-0.5)
    many = _far_apart(theta=-0.5)
    with pytest.raises(OverflowError):
        for x, y in zip(xs, ys, strict=True):
            one.learn(x, y)
    with pytest.raises(OverflowError):
        many.learn_many(xs, ys)
    assert many.counters() == one.counters()
    assert many.counters()["trials"] == 1
    assert _state(many) == _state(one)


def test_multiclass_winnow_overflow_leaves_the_state_unchanged() -> None:
    """The weight loop raises after it has already changed the earlier weights."""
    learner = registry.build({"kind": "multiclass-winnow", "alpha": 1e150}, labels=[0, 1], size=2)
    doc = learner.export_state()
    doc["arrays"]["w_"] = encode_array(np.array([1e250, 1e200]))
    learner.import_state(doc)
    before = _state(learner)
    with pytest.raises(OverflowError):
        learner.learn([[1.0, 0.0], [0.0, 1.0]], 1)  # w_0 /= 1e150, then w_1 *= 1e150 overflows
    assert _state(learner) == before


def _misfits(case: Any) -> list[Any]:
    """Instances of the learner's own form that may not fit it: beyond its size or its
    classes, or outside [0, 1]."""
    if case.attributes:
        return [Attributes([case.size], [0.5]), Attributes([0], [-3.5]), Attributes([1], [7.0])]
    k = len(case.labels)
    return [
        Experts([case.size], [0], [0.5]),
        Experts([0], [k], [0.5]),
        Experts([0], [0], [-3.5]),
        Experts([1], [1], [7.0]),
    ]


def test_coerce_each_is_coerce_of_each(case: Any) -> None:
    """Instances checked together are checked as one by one: the same instances back,
    or the first misfit's error."""
    learner = case.build()
    stream = case.stream(40, TRAIN)
    good = [learner.coerce(x) for x, _ in stream]
    assert learner.fits_all(good)  # the instances alike are checked together
    assert [id(x) for x in learner.coerce_each(iter(good))] == [id(x) for x in good]
    rng = random.Random(5)
    for odd in [*_misfits(case), stream[0][0]]:
        xs = list(good)
        xs.insert(rng.randrange(len(xs) + 1), odd)
        try:
            expected = [learner.coerce(x) for x in xs]
        except InvalidInstance as e:
            assert not learner.fits_all(xs)
            with pytest.raises(InvalidInstance, match=re.escape(str(e))):
                learner.coerce_each(xs)
            continue
        got = learner.coerce_each(xs)
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            assert type(a) is type(b)
            np.testing.assert_array_equal(case.dense(a), case.dense(b))
