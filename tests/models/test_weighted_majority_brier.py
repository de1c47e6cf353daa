"""Weighted Majority's ``brier`` option: a sub-expert's loss is its 0/1 loss plus ``brier``
times half the Brier score of its votes (docs/fusion.rst).

The rule against a plain re-implementation (floor and share included), the mistake bound
with the best sub-expert's loss in place of its mistakes (on random and adversarial
sequences), a stream on which only the option tells two sub-experts apart (it fails
without it), the option at 0 as the learner was, bounds named, state round trips and an
exact replay, and the fusion preset that turns it on.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.core.instance import Experts
from models.core.params import InvalidParameter
from models.learners.fusion import Fusion
from models.learners.weighted_majority import BRIER_LIMIT, WeightedMajority
from models.registry import build, describe

N, K = 6, 3


def _half_brier(votes: np.ndarray, y: int) -> float:
    """Half the Brier score of one sub-expert's votes, scaled to sum to one."""
    p = votes / votes.sum()
    return float(((p - np.eye(votes.size)[y]) ** 2).sum() / 2)


def _naive(
    w: np.ndarray, x: np.ndarray, y: int, beta: float, gamma: float, share: float, b: float
) -> np.ndarray:
    """One every-trial update, all weights at once: w_i *= beta ** (wrong + b * brier)."""
    w = w.copy()
    lim = gamma * w.sum() / w.size
    moved = False
    for e in range(w.size):
        if not x[e].any():
            continue  # abstains
        loss = float(int(np.argmax(x[e])) != y) + b * _half_brier(x[e], y)
        if loss == 0.0:
            continue
        new = w[e] * beta**loss
        if new < w[e] and new < lim:
            new = min(w[e], lim)
        moved = moved or gamma == 0.0 or new != w[e]
        w[e] = new
    if share and moved:
        w = (1 - share) * w + share * w.sum() / w.size
    return w


def _votes(rng: np.random.Generator) -> np.ndarray:
    """Each sub-expert's votes: probabilities, a one-hot label, a sparse vote or none."""
    x = rng.dirichlet(np.ones(K), size=N).round(3)
    x[rng.random(N) < 0.2] = np.eye(K)[rng.integers(K)]
    x[rng.random((N, K)) < 0.15] = 0.0
    return x


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    gamma=st.sampled_from([0.0, 0.05, 0.4]),
    share=st.sampled_from([0.0, 0.02]),
    b=st.sampled_from([0.5, 1.0, 4.0]),
)
def test_the_brier_term_applies_as_stated(seed: int, gamma: float, share: float, b: float) -> None:
    rng = np.random.default_rng(seed)
    wm = WeightedMajority(
        n_experts=N, labels=list(range(K)), beta=0.4, weight_floor=gamma, fixed_share=share, brier=b
    )
    w = np.ones(N)
    for _ in range(80):
        x, y = _votes(rng), int(rng.integers(K))
        wm.learn(Experts.from_dense(x), y)
        w = _naive(w, x, y, 0.4, gamma, share, b)
        np.testing.assert_allclose(wm.weights() / wm.weights().sum(), w / w.sum(), rtol=1e-9)
    assert np.isclose(wm.scalars_[0], wm.weights().sum(), rtol=1e-9)


def _bound(n: int, loss: float, beta: float) -> float:
    return (math.log(n) + loss * math.log(1 / beta)) / math.log(2 / (1 + beta))


@pytest.mark.parametrize("adversary", [False, True])
@pytest.mark.parametrize(("beta", "b"), [(0.5, 1.0), (0.2, 3.0), (0.8, 0.5)])
def test_mistakes_within_the_bound_of_the_best_loss(adversary: bool, beta: float, b: float) -> None:
    """M <= (ln n + L ln(1/beta)) / ln(2/(1+beta)) for every sub-expert's loss L (its
    mistakes plus b times its half Brier scores). Sub-expert 0 puts 0.9 on a label c, the
    others vote at random. At random, c is the label 19 times in 20; the adversary makes
    every trial a mistake: the label is c unless the learner predicts c, then another."""
    rng = np.random.default_rng(int(100 * beta + b))
    wm = WeightedMajority(n_experts=N, labels=list(range(K)), beta=beta, brier=b)
    losses = np.zeros(N)
    mistakes = 0
    for _ in range(400):
        x = rng.dirichlet(np.ones(K), size=N)  # every sub-expert votes
        c = int(rng.integers(K))
        x[0] = 0.85 * np.eye(K)[c] + 0.05
        y = c if rng.random() < 0.95 else (c + 1) % K
        if adversary:
            y = (c + 1) % K if wm.predict(Experts.from_dense(x)) == c else c
        mistakes += wm.learn(Experts.from_dense(x), y).mistake
        losses += [float(np.argmax(v) != y) + b * _half_brier(v, y) for v in x]
    assert 0 < mistakes <= _bound(N, float(losses.min()), beta)
    if adversary:
        assert mistakes == 400


def test_sub_experts_with_the_same_mistakes_are_told_apart_by_their_probabilities() -> None:
    """Two classifiers, always right so far, one sure (0.9) and one hesitant (0.55); then
    they disagree and the sure one is right. Without the option their weights are equal and
    the tie goes to the first label, the hesitant one's: a mistake the option avoids."""
    sure, hesitant = [0.1, 0.9], [0.45, 0.55]
    warm = Experts.from_dense([sure, hesitant])  # both vote label 1, which is right
    split = Experts.from_dense([[0.1, 0.9], [0.55, 0.45]])
    for brier, mistake in [(0.0, True), (1.0, False)]:
        wm = WeightedMajority(n_experts=2, labels=[0, 1], brier=brier)
        for _ in range(5):
            assert not wm.learn(warm, 1).mistake
        assert wm.learn(split, 1).mistake is mistake


def _stream(trials: int, seed: int) -> tuple[list[Experts], list[int]]:
    rng = np.random.default_rng(seed)
    return [Experts.from_dense(_votes(rng)) for _ in range(trials)], [
        int(v) for v in rng.integers(K, size=trials)
    ]


def _state(learner: Any) -> str:
    return json.dumps(learner.export_state(), sort_keys=True)


def test_the_option_at_zero_is_the_learner_as_it_was() -> None:
    plain = WeightedMajority(n_experts=N, labels=list(range(K)), weight_floor=0.1)
    zero = WeightedMajority(n_experts=N, labels=list(range(K)), weight_floor=0.1, brier=0.0)
    on = WeightedMajority(n_experts=N, labels=list(range(K)), weight_floor=0.1, brier=1.0)
    assert zero.spec() == plain.spec() and "brier" not in plain.spec()
    assert on.spec()["brier"] == 1.0
    xs, ys = _stream(200, 3)
    for x, y in zip(xs, ys, strict=True):
        assert zero.learn(x, y) == plain.learn(x, y)
        on.learn(x, y)
    assert _state(zero) == _state(plain)
    assert _state(on) != _state(plain)
    restored = WeightedMajority(n_experts=N, labels=list(range(K)), weight_floor=0.1, brier=0)
    restored.import_state(json.loads(_state(plain)))  # a state written without the option
    assert _state(restored) == _state(plain)


@pytest.mark.parametrize("value", [-0.5, BRIER_LIMIT * 1.01, math.nan, math.inf, "1", True])
def test_a_brier_weight_out_of_bounds_is_refused_naming_it(value: Any) -> None:
    for kind in ("weighted-majority", "fusion"):
        with pytest.raises(InvalidParameter) as got:
            build({"kind": kind, "brier": value}, labels=[0, 1], size=3)
        assert got.value.name == "brier"
        assert f"<= {BRIER_LIMIT:g}" in str(got.value)


def test_the_option_is_listed_with_its_bound_and_each_default() -> None:
    listed = {d["kind"]: {p["name"]: p for p in d["parameters"]} for d in describe()}
    assert listed["weighted-majority"]["brier"]["default"] == 0.0
    assert listed["fusion"]["brier"]["default"] == 1.0
    assert listed["fusion"]["brier"]["expected"] == f"a finite number >= 0 and <= {BRIER_LIMIT:g}"


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "fusion"},
        {"kind": "weighted-majority", "brier": 2.5, "weight_floor": 0.05, "fixed_share": 0.01},
        {"kind": "weighted-majority", "brier": 0.5, "update": "on_mistake"},
    ],
    ids=str,
)
def test_a_state_round_trip_and_a_replay_are_exact(spec: dict[str, Any]) -> None:
    xs, ys = _stream(300, 5)
    learner = build(spec, labels=list(range(K)), size=N)
    for x, y in zip(xs[:150], ys[:150], strict=True):
        learner.learn(x, y)
    doc = json.loads(_state(learner))
    assert doc["params"]["brier"] == spec.get("brier", 1.0)
    copy = build(spec, labels=list(range(K)), size=N)
    copy.import_state(doc)
    assert _state(copy) == _state(learner)
    for x, y in zip(xs[150:], ys[150:], strict=True):
        assert copy.learn(x, y) == learner.learn(x, y)
    assert _state(copy) == _state(learner)
    again = build(spec, labels=list(range(K)), size=N)  # the whole stream replayed
    for x, y in zip(xs, ys, strict=True):
        again.learn(x, y)
    assert _state(again) == _state(learner)


def test_fusion_is_weighted_majority_with_the_preset_options() -> None:
    fusion = Fusion(n_experts=N, labels=list(range(K)))
    wm = WeightedMajority(
        n_experts=N, labels=list(range(K)), beta=0.5, weight_floor=0.01, brier=1.0
    )
    assert fusion.spec() == {**wm.spec(), "kind": "fusion", "fixed_share": 0.0}
    xs, ys = _stream(200, 6)
    for x, y in zip(xs, ys, strict=True):
        assert fusion.learn(x, y) == wm.learn(x, y)
    np.testing.assert_array_equal(fusion.weights(), wm.weights())
