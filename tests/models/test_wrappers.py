"""Averaging and recycling against their definitions (Mesterharm & Hsu, §V and §VI): the
lazy average equals the naive one, recycling with u = 0 is B, and after recycling every
stored item with updates left needs none."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from models.core.instance import Attributes
from models.core.learner import Learner
from models.inputs.datasets import MajorityProblem
from models.registry import build
from models.wrappers.averaging import Averaging
from models.wrappers.recycling import Recycling
from models.wrappers.subexpert import SubExpert

LABELS = [0, 1, 2, 3, 4]

SUBEXPERT_LEARNERS = [
    {"kind": "subexpert", "learner": {"kind": "balanced-winnow", "alpha": 1.3}},
    {"kind": "subexpert", "learner": {"kind": "perceptron"}},
    {"kind": "subexpert", "learner": {"kind": "alma", "p": 3.0}},
    {"kind": "committee", "alpha": 1.4},
    {"kind": "multiclass-winnow", "alpha": 0.3},
]
ATTRIBUTE_LEARNERS = [
    {"kind": "balanced-winnow", "alpha": 1.5},
    {"kind": "perceptron"},
    {"kind": "alma", "p": 2.5},
    {"kind": "winnow", "theta": 3.0},
]


def _majority(trials: int, noise: float, seed: int) -> tuple[list[Any], list[int]]:
    xs, ys, _ = MajorityProblem(noise=noise).sample(trials, np.random.default_rng(seed))
    return xs, [int(y) for y in ys]


def _sparse(trials: int, n: int, seed: int) -> tuple[list[Attributes], list[int]]:
    rng = np.random.default_rng(seed)
    target = rng.normal(size=n)
    xs, ys = [], []
    for _ in range(trials):
        idx = np.sort(rng.choice(n, size=rng.integers(1, 6), replace=False))
        val = rng.random(idx.size)
        xs.append(Attributes(idx, val))
        y = 1 if target[idx] @ val >= 0 else -1
        ys.append(-y if rng.random() < 0.1 else y)
    return xs, ys


def _naive_average(inner: Learner, xs: list[Any], ys: list[Any]) -> list[np.ndarray]:
    """(1/T) sum_t H_t after every trial, H_t the inner learner's normalised weights."""
    total = None
    out = []
    for t, (x, y) in enumerate(zip(xs, ys, strict=True), start=1):
        inner.learn(x, y)
        h = inner.linear_coef() @ inner.linear_rows(None) * inner.linear_scale()
        total = h.copy() if total is None else total + h
        out.append(total / t)
    return out


@pytest.mark.parametrize("spec", SUBEXPERT_LEARNERS, ids=lambda s: str(s))
def test_lazy_average_equals_the_naive_one_on_sub_experts(spec: dict[str, Any]) -> None:
    xs, ys = _majority(600, noise=0.1, seed=1)
    ab = build({"kind": "averaging", "learner": spec}, labels=LABELS, size=25)
    assert isinstance(ab, Averaging)
    naive = _naive_average(build(spec, labels=LABELS, size=25), xs, ys)
    for t, (x, y) in enumerate(zip(xs, ys, strict=True)):
        ab.learn(x, y)
        np.testing.assert_allclose(ab.weights(), naive[t], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("spec", ATTRIBUTE_LEARNERS, ids=lambda s: str(s))
def test_lazy_average_equals_the_naive_one_on_sparse_attributes(spec: dict[str, Any]) -> None:
    xs, ys = _sparse(500, n=40, seed=2)
    ab = build({"kind": "averaging", "learner": spec}, labels=[1, -1], size=40)
    naive = _naive_average(build(spec, labels=[1, -1], size=40), xs, ys)
    for t, (x, y) in enumerate(zip(xs, ys, strict=True)):
        ab.learn(x, y)
        np.testing.assert_allclose(ab.weights(), naive[t], rtol=1e-9, atol=1e-12)


def test_lazy_average_follows_a_recycled_learner() -> None:
    xs, ys = _majority(400, noise=0.1, seed=3)
    inner = {"kind": "recycling", "size": 20, "learner": SUBEXPERT_LEARNERS[1]}
    arb = build({"kind": "averaging", "learner": inner}, labels=LABELS, size=25)
    naive = _naive_average(build(inner, labels=LABELS, size=25), xs, ys)
    for t, (x, y) in enumerate(zip(xs, ys, strict=True)):
        arb.learn(x, y)
        np.testing.assert_allclose(arb.weights(), naive[t], rtol=1e-9, atol=1e-12)


def test_averaging_survives_balanced_winnow_shifting_its_weights() -> None:
    """A large alpha makes Balanced Winnow shift its weights by 2**-600; the average keeps
    predicting as the (rescaled) naive average does."""
    spec = {"kind": "subexpert", "learner": {"kind": "balanced-winnow", "alpha": 1e30}}
    xs, ys = _majority(400, noise=0.2, seed=4)
    ab = build({"kind": "averaging", "learner": spec}, labels=LABELS, size=25)
    for x, y in zip(xs, ys, strict=True):
        ab.learn(x, y)
    assert ab.learner_.linear_shift() > 0
    assert np.isfinite(ab.weights()).all()
    snap = ab.snapshot()
    assert [snap.predict(x) for x in xs[:100]] == [ab.predict(x) for x in xs[:100]]


def test_averaging_a_learner_that_never_updates_predicts_like_it() -> None:
    # Winnow with a threshold nothing reaches and all-negative labels never updates.
    xs, _ = _sparse(200, n=30, seed=5)
    spec = {"kind": "winnow", "theta": 1e6}
    b = build(spec, labels=[1, -1], size=30)
    ab = build({"kind": "averaging", "learner": spec}, labels=[1, -1], size=30)
    for x in xs:
        assert ab.predict(x) == b.predict(x)
        assert ab.learn(x, -1) == b.learn(x, -1) == (False, False)


@pytest.mark.parametrize("spec", [*SUBEXPERT_LEARNERS, {"kind": "weighted-majority"}], ids=str)
def test_recycling_with_no_updates_allowed_is_the_basic_learner(spec: dict[str, Any]) -> None:
    xs, ys = _majority(500, noise=0.1, seed=6)
    b = build(spec, labels=LABELS, size=25)
    rb = build({"kind": "recycling", "max_updates": 0, "learner": spec}, labels=LABELS, size=25)
    for x, y in zip(xs, ys, strict=True):
        assert rb.predict(x) == b.predict(x)
        assert rb.learn(x, y) == b.learn(x, y)
    assert isinstance(rb, Recycling) and rb.internal_trials_ == 0
    np.testing.assert_array_equal(rb.snapshot().weights, b.snapshot().weights)


def _stored(rb: Recycling) -> list[tuple[Any, int, int]]:
    s = rb.size
    out = []
    for r in range(int(rb.ring_[1])):
        j = (int(rb.ring_[0]) + r) % s
        out.append((rb._item(j), int(rb.items_y_[j]), int(rb.items_count_[j])))
    return out


@pytest.mark.parametrize("spec", SUBEXPERT_LEARNERS, ids=lambda s: str(s))
def test_after_recycling_every_item_with_updates_left_needs_none(spec: dict[str, Any]) -> None:
    """After a recycling phase, each stored item whose count is below u is
    learnt by the current hypothesis without an update (a correct prediction, and for
    margin learners the margin condition met)."""
    xs, ys = _majority(300, noise=0.15, seed=7)
    u = 3
    spec = {"kind": "recycling", "size": 30, "max_updates": u, "learner": spec}
    rb = build(spec, labels=LABELS, size=25)
    assert isinstance(rb, Recycling)
    checked = 0
    for x, y in zip(xs, ys, strict=True):
        if not rb.learn(x, y).updated:
            continue
        for item, c, count in _stored(rb):
            if count < u:
                probe = rb.learner_.clone()
                probe.import_state(rb.learner_.export_state())
                assert probe.learn(item, LABELS[c]) == (False, False)
                checked += 1
    assert checked > 100


def test_recycling_counts_internal_mistakes_apart_from_real_ones() -> None:
    xs, ys = _majority(800, noise=0.2, seed=8)
    spec = SUBEXPERT_LEARNERS[1]
    b = build(spec, labels=LABELS, size=25)
    rb = build({"kind": "recycling", "size": 50, "learner": spec}, labels=LABELS, size=25)
    assert isinstance(rb, Recycling)
    real = sum(rb.learn(x, y).mistake for x, y in zip(xs, ys, strict=True))
    assert rb.mistakes_ == real and rb.trials_ == len(xs)
    assert rb.internal_trials_ > len(xs) and 0 < rb.internal_mistakes_ <= rb.internal_trials_
    assert rb.internal_updates_ >= rb.internal_mistakes_  # perceptron: one update per mistake
    for x, y in zip(xs, ys, strict=True):
        b.learn(x, y)
    assert rb.mistakes_ != b.mistakes_  # recycling changed the hypothesis, so the mistakes


def test_compiled_and_generic_recycling_agree() -> None:
    """Weighted Majority has no compiled trial, so it recycles through the public ``learn``;
    the same algorithm for a Committee runs compiled. On a learner that has both paths (we
    force the generic one) they must agree exactly."""
    xs, ys = _majority(400, noise=0.1, seed=9)
    spec = {"kind": "recycling", "size": 25, "learner": {"kind": "committee", "alpha": 1.3}}
    fast = build(spec, labels=LABELS, size=25)
    slow = build(spec, labels=LABELS, size=25)
    assert isinstance(fast, Recycling) and isinstance(slow, Recycling)
    slow.learner_.kernel_state = lambda: None  # type: ignore[method-assign]
    for x, y in zip(xs, ys, strict=True):
        assert fast.learn(x, y) == slow.learn(x, y)
    np.testing.assert_array_equal(fast.internal_, slow.internal_)
    np.testing.assert_array_equal(fast.learner_.weights(), slow.learner_.weights())  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["balanced-winnow", "perceptron"])
def test_zero_margin_rule_of_the_sub_expert_form_acts_only_through_the_runner_up(kind):
    """A correct prediction on a tie: from the predicted class z = 0, so the binary
    learner's zero-margin rule never fires; from the tied runner-up, w.z = 0 and it does."""
    x = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]  # all weights equal: both classes score alike
    outcomes = {}
    for z in ("predicted", "runner_up"):
        for on_zero in (True, False):
            inner = {"kind": kind}
            if kind == "balanced-winnow":
                inner["update_on_zero_margin"] = on_zero
            se = SubExpert(inner, n_experts=3, labels=[0, 1], subexpert_z=z)
            outcomes[z, on_zero] = tuple(se.learn(x, 0)), se.weights().tolist()
    assert outcomes["predicted", True] == outcomes["predicted", False]
    assert outcomes["predicted", True] == ((False, False), [0.0, 0.0, 0.0])
    assert outcomes["runner_up", True][0] == (False, True)
    assert outcomes["runner_up", True][1][0] > 0 > outcomes["runner_up", True][1][1]
    expected_strict = (False, kind == "perceptron")  # the Perceptron has no such option
    assert outcomes["runner_up", False][0] == expected_strict
