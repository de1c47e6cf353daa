"""Tracking a changing best: ``weight_floor`` and ``fixed_share`` (docs/tracking.rst).

Each recovery test runs a sequence whose best expert (or relevant attribute) changes halfway,
the new best having been penalised heavily before the change. With the option on, the
mistakes after the change stay within the shifting bound computed here from the learner's
state at the change; with it off, the same sequence costs more mistakes than that bound,
so every recovery test fails on a learner without the option. Then: the rules against a
plain re-implementation, the compiled paths against the Python one, state round trips,
and the options at 0 against the learners as they were.
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
from models.core.learner import Learner
from models.learners.balanced import BalancedWinnow
from models.learners.committee import Committee
from models.learners.weighted_majority import WeightedMajority
from models.learners.winnow import Winnow
from models.registry import build
from models.wrappers.recycling import Recycling

N = 10  # experts or attributes


def _mistakes(learner: Learner, xs: list[Any], ys: list[Any]) -> int:
    return sum(learner.learn(x, y).mistake for x, y in zip(xs, ys, strict=True))


# -- Weighted Majority: expert 0 right, then expert 1 right (wrong on every earlier trial) --


def _wm_phases(trials: int, seed: int) -> tuple[list[Experts], list[int], list[Experts], list[int]]:
    rng = np.random.default_rng(seed)

    def phase(best: int, worst: int) -> tuple[list[Experts], list[int]]:
        xs, ys = [], []
        for _ in range(trials):
            y = int(rng.integers(2))
            votes = rng.integers(2, size=N)
            votes[best], votes[worst] = y, 1 - y
            xs.append(Experts.one_hot(votes))
            ys.append(y)
        return xs, ys

    return (*phase(0, 1), *phase(1, 0))


def _wm_segment(learner: WeightedMajority, xs: list[Experts], ys: list[int]) -> tuple[int, int]:
    """(mistakes, updates) over one segment."""
    mistakes = updates = 0
    for x, y in zip(xs, ys, strict=True):
        out = learner.learn(x, y)
        mistakes += out.mistake
        updates += out.updated
    return mistakes, updates


@pytest.mark.parametrize("seed", range(5))
def test_wml_floor_recovers_within_its_shifting_bound(seed: int) -> None:
    beta, gamma = 0.5, 0.05
    x1, y1, x2, y2 = _wm_phases(300, seed)
    tracking = WeightedMajority(n_experts=N, labels=[0, 1], beta=beta, weight_floor=gamma)
    plain = WeightedMajority(n_experts=N, labels=[0, 1], beta=beta)
    rate = math.log(1.0 / (1.0 - (1.0 - beta) * (0.5 - gamma)))
    first, _ = _wm_segment(tracking, x1, y1)
    assert first <= math.log(N) / rate  # expert 0 makes no mistake in the first segment
    _wm_segment(plain, x1, y1)
    bound = math.log(N / gamma) / rate  # expert 1 makes none in the second
    after, _ = _wm_segment(tracking, x2, y2)
    assert 0 < after <= bound
    assert _wm_segment(plain, x2, y2)[0] > bound


@pytest.mark.parametrize("seed", range(5))
def test_fixed_share_recovers_within_its_shifting_bound(seed: int) -> None:
    beta, share = 0.5, 0.01
    x1, y1, x2, y2 = _wm_phases(300, seed)
    tracking = WeightedMajority(n_experts=N, labels=[0, 1], beta=beta, fixed_share=share)
    plain = WeightedMajority(n_experts=N, labels=[0, 1], beta=beta)
    _wm_segment(tracking, x1, y1)
    _wm_segment(plain, x1, y1)
    after, updates = _wm_segment(tracking, x2, y2)
    bound = (math.log(N / share) + updates * math.log(1.0 / (1.0 - share))) / math.log(
        2.0 / (1.0 + beta)
    )
    assert 0 < after <= bound
    assert _wm_segment(plain, x2, y2)[0] > bound


# -- Committee: expert 1 alone and wrong, then right against expert 0 -------------------------


def _committee_phases(
    trials: int,
) -> tuple[list[np.ndarray], list[int], list[np.ndarray], list[int]]:
    """Expert 0 votes for the label and expert 1 against it, or expert 1 votes alone and
    wrongly (so every such trial demotes it); then expert 1 is right and expert 0 wrong.
    The other experts abstain."""

    def votes(by: dict[int, int]) -> np.ndarray:
        x = np.zeros((N, 2))
        for e, c in by.items():
            x[e, c] = 1.0
        return x

    x1 = [votes({0: t % 2, 1: 1 - t % 2} if t % 2 else {1: 0}) for t in range(trials)]
    y1 = [t % 2 if t % 2 else 1 for t in range(trials)]
    x2 = [votes({1: 0, 0: 1}) for _ in range(trials)]
    return x1, y1, x2, [0] * trials


@pytest.mark.parametrize(
    ("floor", "share"), [(0.1, 0.0), (0.0, 0.02), (0.1, 0.02)], ids=["floor", "share", "both"]
)
def test_committee_recovers_within_the_ratio_bound(floor: float, share: float) -> None:
    """After the change every mistake multiplies r_1 / r_0 by alpha^2 at least (a share adds
    the same amount to both, which only brings them closer), and the change finds
    r_0 / r_1 <= n / gamma (floor) or n / alpha_s (share): at most
    floor(ln(n / gamma') / (2 ln alpha)) + 1 mistakes, gamma' the larger of the two."""
    alpha = 1.5
    x1, y1, x2, y2 = _committee_phases(400)
    tracking = Committee(
        n_experts=N, labels=[0, 1], alpha=alpha, weight_floor=floor, fixed_share=share
    )
    plain = Committee(n_experts=N, labels=[0, 1], alpha=alpha)
    _mistakes(tracking, x1, y1)
    _mistakes(plain, x1, y1)
    bound = math.floor(math.log(N / max(floor, share)) / (2 * math.log(alpha))) + 1
    assert 0 < _mistakes(tracking, x2, y2) <= bound
    assert _mistakes(plain, x2, y2) > bound


# -- Winnow: x_0 relevant, then x_1 (demoted on every second trial before) --------------------


def _winnow_phases(trials: int) -> tuple[list[list[int]], list[int], list[list[int]], list[int]]:
    """Before the change x_0 is the target; every second trial is a noisy negative holding
    x_0 and x_1, which demotes x_1 each time. After it the target is x_1, and x_0 alone is a
    negative."""

    def instance(*on: int) -> list[int]:
        return [1 if i in on else 0 for i in range(2 * N)]

    x1 = [instance(0) if t % 2 == 0 else instance(0, 1) for t in range(trials)]
    y1 = [1 if t % 2 == 0 else -1 for t in range(trials)]
    x2 = [instance(1) if t % 2 == 0 else instance(0) for t in range(trials)]
    y2 = [1 if t % 2 == 0 else -1 for t in range(trials)]
    return x1, y1, x2, y2


def test_winnow_floor_recovers_within_its_shifting_bound() -> None:
    """From the change on, the target is the disjunction x_1 with no noise. A false negative
    promotes x_1 (never demoted again, never below the floor eps), so there are at most
    P = ceil(log_alpha(theta / eps)) of them; a false positive removes at least
    (1 - 1/alpha)(theta - n eps) of the total weight W and a false negative adds at most
    (alpha - 1) theta, so there are at most (W_0 + (alpha - 1) theta P) / ((1 - 1/alpha)
    (theta - n eps)) false positives, W_0 the total at the change."""
    alpha, theta, eps, n = 2.0, 10.0, 0.05, 2 * N
    x1, y1, x2, y2 = _winnow_phases(1200)
    tracking = Winnow(n_features=n, alpha=alpha, theta=theta, weight_floor=eps)
    plain = Winnow(n_features=n, alpha=alpha, theta=theta)
    _mistakes(tracking, x1, y1)
    _mistakes(plain, x1, y1)
    assert plain.weights()[1] < eps * alpha**-100  # the new best was penalised heavily
    promotions = math.ceil(math.log(theta / eps, alpha))
    w0 = float(tracking.weights().sum())
    demotions = (w0 + (alpha - 1) * theta * promotions) / ((1 - 1 / alpha) * (theta - n * eps))
    bound = promotions + demotions
    assert 0 < _mistakes(tracking, x2, y2) <= bound
    assert _mistakes(plain, x2, y2) > bound


# -- the rules, against a plain re-implementation ----------------------------------------------


def _naive_wm(
    weights: np.ndarray, votes: np.ndarray, y: int, beta: float, gamma: float, share: float
) -> np.ndarray:
    """One every-trial WM update with floor and share, all weights at once."""
    w = weights.copy()
    lim = gamma * w.sum() / w.size
    moved = False
    for e in np.flatnonzero(votes != y):
        new = w[e] * beta
        if new < w[e] and new < lim:
            new = min(w[e], lim)
        moved = moved or gamma == 0.0 or new != w[e]
        w[e] = new
    if share and moved:
        w = (1 - share) * w + share * w.sum() / w.size
    return w


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    gamma=st.sampled_from([0.0, 0.1, 0.4]),
    share=st.sampled_from([0.0, 0.01, 0.3]),
)
def test_weighted_majority_applies_floor_and_share_as_stated(
    seed: int, gamma: float, share: float
) -> None:
    rng = np.random.default_rng(seed)
    wm = WeightedMajority(
        n_experts=6, labels=[0, 1, 2], beta=0.3, weight_floor=gamma, fixed_share=share
    )
    w = np.ones(6)
    for _ in range(60):
        votes, y = rng.integers(3, size=6), int(rng.integers(3))
        wm.learn(Experts.one_hot(votes), y)
        w = _naive_wm(w, votes, y, 0.3, gamma, share)
        np.testing.assert_allclose(wm.weights(), w, rtol=1e-9)
    assert wm.weights().min() >= 0.0


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), eps=st.sampled_from([0.0, 0.3, 0.9]))
def test_winnow_never_demotes_below_the_floor(seed: int, eps: float) -> None:
    rng = np.random.default_rng(seed)
    w = Winnow(n_features=8, alpha=2.0, theta=2.0, weight_floor=eps)
    bw = BalancedWinnow(n_features=8, alpha=2.0, theta=0.5, weight_floor=eps)
    for _ in range(80):
        x, y = (rng.random(8) < 0.4).astype(float), int(rng.choice([1, -1]))
        before, before_b = w.weights(), bw.w_.copy()
        w.learn(x, y)
        bw.learn(x, y)
        assert (w.weights() >= np.minimum(before, eps)).all()
        assert (bw.w_ >= np.minimum(before_b, eps)).all()


# -- every path gives the same results ---------------------------------------------------------


def _stream(kind: str, trials: int, seed: int) -> tuple[list[Any], list[Any]]:
    rng = np.random.default_rng(seed)
    if kind == "experts":
        xs = [Experts.one_hot(rng.integers(3, size=N)) for _ in range(trials)]
        return xs, [int(v) for v in rng.integers(3, size=trials)]
    xs = [(rng.random(N) < 0.3).astype(float) * rng.random(N) for _ in range(trials)]
    return xs, [int(v) for v in rng.choice([1, -1], size=trials)]


TRACKING = [
    ({"kind": "committee", "alpha": 1.4, "weight_floor": 0.2, "fixed_share": 0.05}, "experts"),
    ({"kind": "committee", "alpha": 1.4, "weight_floor": 0.3}, "experts"),
    ({"kind": "winnow", "weight_floor": 0.8}, "attributes"),
    ({"kind": "winnow", "demotion": "eliminate", "weight_floor": 0.3}, "attributes"),
    ({"kind": "balanced-winnow", "alpha": 2.0, "weight_floor": 0.4}, "attributes"),
    ({"kind": "balanced-winnow", "alpha": 1.5, "theta": 1.0, "weight_floor": 0.4}, "attributes"),
]


def _labels(form: str) -> list[int]:
    return [0, 1, 2] if form == "experts" else [1, -1]


@pytest.mark.parametrize(("spec", "form"), TRACKING, ids=lambda v: str(v))
def test_compiled_recycling_agrees_with_the_generic_loop(spec: dict[str, Any], form: str) -> None:
    xs, ys = _stream(form, 300, 4)
    wrapper = {"kind": "recycling", "size": 12, "max_updates": 3, "learner": spec}
    fast = build(wrapper, labels=_labels(form), size=N)
    slow = build(wrapper, labels=_labels(form), size=N)
    assert isinstance(fast, Recycling) and isinstance(slow, Recycling)
    assert fast.learner_.kernel_state() is not None
    slow.learner_.kernel_state = lambda: None  # type: ignore[method-assign]
    for x, y in zip(xs, ys, strict=True):
        assert fast.learn(x, y) == slow.learn(x, y)
    np.testing.assert_array_equal(fast.internal_, slow.internal_)
    assert _arrays(fast.learner_) == _arrays(slow.learner_)


@pytest.mark.parametrize("theta", [0.0, 1.0])
def test_balanced_batch_agrees_with_trial_by_trial(theta: float) -> None:
    xs, ys = _stream("attributes", 400, 5)
    batch = BalancedWinnow(n_features=N, alpha=3.0, theta=theta, weight_floor=0.4)
    single = batch.clone()
    mistakes, updates = batch.learn_many(xs, ys)
    outs = [single.learn(x, y) for x, y in zip(xs, ys, strict=True)]
    assert mistakes.tolist() == [o.mistake for o in outs]
    assert updates.tolist() == [o.updated for o in outs]
    assert _state(batch) == _state(single)


# -- state ---------------------------------------------------------------------------------------


def _state(learner: Learner) -> str:
    return json.dumps(learner.export_state(), sort_keys=True)


def _arrays(learner: Learner) -> Any:
    """The learned arrays of a state (the counters of a wrapped learner depend on the path)."""
    return learner.export_state()["arrays"]


ALL = [
    *TRACKING,
    ({"kind": "weighted-majority", "weight_floor": 0.2, "fixed_share": 0.05}, "experts"),
    ({"kind": "weighted-majority", "update": "on_mistake", "fixed_share": 0.1}, "experts"),
]


@pytest.mark.parametrize(("spec", "form"), ALL, ids=lambda v: str(v))
def test_state_round_trip_with_the_options_on(spec: dict[str, Any], form: str) -> None:
    xs, ys = _stream(form, 200, 7)
    learner = build(spec, labels=_labels(form), size=N)
    for x, y in zip(xs[:100], ys[:100], strict=True):
        learner.learn(x, y)
    doc = json.loads(_state(learner))
    assert {k: doc["params"][k] for k in ("weight_floor", "fixed_share") if k in spec} == {
        k: spec[k] for k in ("weight_floor", "fixed_share") if k in spec
    }
    copy = build(spec, labels=_labels(form), size=N)
    copy.import_state(doc)
    assert _state(copy) == _state(learner)
    for x, y in zip(xs[100:], ys[100:], strict=True):
        assert copy.learn(x, y) == learner.learn(x, y)
    assert _state(copy) == _state(learner)


@pytest.mark.parametrize(("spec", "form"), ALL, ids=lambda v: str(v))
def test_options_at_zero_are_the_learner_as_it_was(spec: dict[str, Any], form: str) -> None:
    """With the options at 0 the spec, every trial and the state are those of a learner
    built without them, and a state written without them imports."""
    off = {k: v for k, v in spec.items() if k not in ("weight_floor", "fixed_share")}
    zero = {**off, **{k: 0.0 for k in ("weight_floor", "fixed_share") if k in spec}}
    plain = build(off, labels=_labels(form), size=N)
    zeroed = build(zero, labels=_labels(form), size=N)
    tracking = build(spec, labels=_labels(form), size=N)
    assert zeroed.spec() == plain.spec() and "weight_floor" not in plain.spec()
    xs, ys = _stream(form, 300, 8)
    for x, y in zip(xs, ys, strict=True):
        assert zeroed.learn(x, y) == plain.learn(x, y)
        tracking.learn(x, y)
    assert _state(zeroed) == _state(plain)
    restored = build(off, labels=_labels(form), size=N)
    restored.import_state(json.loads(_state(plain)))
    zeroed.import_state(json.loads(_state(plain)))
    assert _state(zeroed) == _state(restored) == _state(plain)
    # the options, on, do change the learner on this stream
    assert _arrays(tracking) != _arrays(plain)


def test_a_new_expert_takes_the_weight_of_one_never_moved_shares_included() -> None:
    """Growing: a new expert starts where an expert that never voted is, floor and shares
    included (Committee's and Weighted Majority's untouched weight moves with each share)."""
    rng = np.random.default_rng(9)
    xs = []
    for _ in range(200):
        x = np.zeros((N, 3))
        x[np.arange(N - 1), rng.integers(3, size=N - 1)] = 1.0  # the last expert abstains
        xs.append(x)
    ys = [int(v) for v in rng.integers(3, size=200)]
    params = {"n_experts": N, "labels": [0, 1, 2], "weight_floor": 0.2, "fixed_share": 0.05}
    committee, wm = Committee(**params), WeightedMajority(**params)  # type: ignore[arg-type]
    for x, y in zip(xs, ys, strict=True):
        committee.learn(x, y)
        wm.learn(x, y)
    at = np.arange(N)
    grown_c, grown_wm = committee.grown(N + 3, at), wm.grown(N + 3, at)
    assert isinstance(grown_c, Committee) and isinstance(grown_wm, WeightedMajority)
    assert committee.r_[-1] != committee.r_[0]  # the others moved
    np.testing.assert_array_equal(grown_c.r_[N:], committee.r_[-1])
    np.testing.assert_array_equal(grown_wm.u_[N:], wm.u_[-1])
    np.testing.assert_array_equal(grown_c.r_[:N], committee.r_)
