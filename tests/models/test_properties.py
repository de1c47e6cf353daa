"""Property and equivalence tests: shift invariance (Mesterharm 1999, §4.3), Committee over
two classes as Balanced Winnow and as Weighted Majority, and the weight invariants.

Streams are drawn with numpy from a hypothesis-chosen seed: continuous random votes make
exact score ties (where two mathematically equal computations could round differently)
vanishingly rare, while hypothesis still varies sizes, multipliers and label streams.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.core.instance import Attributes, Experts, attributes_as_experts
from models.learners.balanced import BalancedWinnow
from models.learners.committee import Committee
from models.learners.weighted_majority import WeightedMajority
from models.wrappers.subexpert import SubExpert

SEED = st.integers(0, 2**32 - 1)
PROPERTY = settings(max_examples=25, deadline=None)


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(list(key))


# -- 1. Shift invariance (Mesterharm 1999, §4.3) -------------------------------------------


def _vote_stream(
    rng: np.random.Generator, n: int, k: int, trials: int
) -> tuple[np.ndarray, np.ndarray]:
    """Votes in [0, 0.5] with about a third of them 0, and labels that follow a hidden
    linear-max target most of the time (so learners both err and get things right)."""
    votes = rng.uniform(0.0, 0.5, size=(trials, n, k))
    votes[rng.random(size=votes.shape) < 0.3] = 0.0
    target = rng.normal(size=n)
    ys = np.einsum("tnk,n->tk", votes, target).argmax(axis=1)
    noisy = rng.random(trials) < 0.2
    ys[noisy] = rng.integers(0, k, size=int(noisy.sum()))
    return votes, ys


SHIFT_LEARNERS = {
    "committee": lambda n, labels: Committee(n_experts=n, labels=labels, alpha=1.5),
    "subexpert-balanced": lambda n, labels: SubExpert(
        {"kind": "balanced-winnow", "alpha": 1.5}, n_experts=n, labels=labels
    ),
    "subexpert-perceptron": lambda n, labels: SubExpert(
        {"kind": "perceptron"}, n_experts=n, labels=labels
    ),
    "subexpert-alma-2": lambda n, labels: SubExpert(
        {"kind": "alma", "p": 2.0}, n_experts=n, labels=labels
    ),
    "subexpert-alma-3": lambda n, labels: SubExpert(
        {"kind": "alma", "p": 3.0}, n_experts=n, labels=labels
    ),
    "subexpert-alma-3-predicted": lambda n, labels: SubExpert(
        {"kind": "alma", "p": 3.0}, n_experts=n, labels=labels, subexpert_z="predicted"
    ),
}


def _unambiguous(s: np.ndarray, ss: np.ndarray, tol: float) -> bool:
    """True unless rounding alone could decide the arg-max: the classes tied exactly for
    the top must be the same in both score vectors, and no other class within ``tol``."""
    top = [set(np.flatnonzero(v == v.max()).tolist()) for v in (s, ss)]
    near = [set(np.flatnonzero(v >= v.max() - tol).tolist()) for v in (s, ss)]
    return top[0] == near[0] == top[1] == near[1]


@pytest.mark.parametrize("name", sorted(SHIFT_LEARNERS))
@PROPERTY
@given(seed=SEED, n=st.integers(1, 8), k=st.integers(2, 4))
def test_shift_invariance(name: str, seed: int, n: int, k: int) -> None:
    rng = _rng(seed)
    votes, ys = _vote_stream(rng, n, k, trials=150)
    shifts = rng.uniform(0.0, 0.5, size=n)
    shifts[rng.random(n) < 0.2] = 0.0
    labels = list(range(k))
    plain = SHIFT_LEARNERS[name](n, labels)
    shifted = SHIFT_LEARNERS[name](n, labels)
    n_updates = 0
    for t, (v, y) in enumerate(zip(votes, ys, strict=True)):
        x, xs = v, v + shifts[:, None]
        assert xs.max() <= 1.0
        s, ss = plain.scores(x), shifted.scores(xs)
        scale = max(1.0, float(np.abs(ss).max()))
        # Every class score moves by the same amount.
        assert np.ptp(ss - s) <= 1e-9 * scale, f"trial {t}"
        if not _unambiguous(s, ss, 1e-12 * scale):
            # A tie in real arithmetic that rounding broke in one learner only (e.g. an
            # ALMA weight cancelling to 1e-16 in one and to 0 in the other): the tie rule
            # may then pick different classes, so the two streams may part here.
            break
        assert plain.predict(x) == shifted.predict(xs), f"trial {t}"
        out, out_s = plain.learn(x, int(y)), shifted.learn(xs, int(y))
        assert out == out_s, f"trial {t}"
        n_updates += out.updated
    else:
        assert n_updates > 0  # the whole stream was compared, and it exercised updates
    assert plain.counters() == shifted.counters()
    np.testing.assert_allclose(shifted.weights(), plain.weights(), rtol=1e-9, atol=1e-12)


# -- 2. Committee (k = 2, attributes) == mistake-only Balanced Winnow ----------------------


def _attribute_stream(
    rng: np.random.Generator, m: int, trials: int
) -> tuple[list[Attributes], list[int]]:
    """Continuous attributes in [0, 1], about 40% zero; labels from a noisy random
    threshold, as +1 / -1."""
    x = rng.uniform(0.0, 1.0, size=(trials, m))
    x[rng.random(size=x.shape) < 0.4] = 0.0
    u = rng.normal(size=m)
    ys = np.where(x @ u >= 0.2 * u.sum(), 1, -1)
    flip = rng.random(trials) < 0.1
    ys[flip] = -ys[flip]
    return [Attributes.from_dense(row) for row in x], ys.tolist()


@PROPERTY
@given(seed=SEED, m=st.integers(1, 12), alpha=st.floats(1.05, 2.0))
def test_committee_k2_equals_mistake_only_balanced_winnow(seed: int, m: int, alpha: float) -> None:
    xs, ys = _attribute_stream(_rng(seed), m, trials=300)
    # Class 0 <-> +1: sub-expert (i, 0) carries w+_i and (i, 1) carries w-_i.
    committee = Committee(n_experts=2 * m, labels=(1, -1), alpha=alpha)
    bw = BalancedWinnow(n_features=m, alpha=alpha, update_on_zero_margin=False, labels=(1, -1))
    for t, (x, y) in enumerate(zip(xs, ys, strict=True)):
        e = attributes_as_experts(x, 2)
        assert committee.predict(e) == bw.predict(x), f"trial {t}"
        assert committee.learn(e, y) == bw.learn(x, y), f"trial {t}"
    assert committee.counters() == bw.counters()
    # Committee normalises: its rows are w+ and w- rescaled to sum 1 together.
    rows = committee.weights().reshape(m, 2)
    both = np.stack([bw.w_pos_, bw.w_neg_], axis=1)
    np.testing.assert_allclose(rows, both / both.sum(), rtol=1e-9)


@PROPERTY
@given(seed=SEED, m=st.integers(1, 12), alpha=st.floats(1.05, 2.0))
def test_fig1_balanced_winnow_diverges_from_committee_at_first_trial(
    seed: int, m: int, alpha: float
) -> None:
    rng = _rng(seed)
    x = Attributes.from_dense(rng.uniform(0.01, 1.0, size=m))
    committee = Committee(n_experts=2 * m, labels=(1, -1), alpha=alpha)
    fig1 = BalancedWinnow(n_features=m, alpha=alpha, labels=(1, -1))  # update on margin 0
    # All weights equal: margin exactly 0, both predict +1 (class 0), and y = +1.
    assert fig1.margin(x) == 0.0
    assert committee.predict(attributes_as_experts(x, 2)) == fig1.predict(x) == 1
    assert committee.learn(attributes_as_experts(x, 2), 1) == (False, False)
    assert fig1.learn(x, 1) == (False, True)
    assert (fig1.w_pos_[x.indices] > 1.0).all()
    assert (fig1.w_neg_[x.indices] < 1.0).all()
    np.testing.assert_allclose(committee.weights(), 1.0 / (2 * m), rtol=1e-14)


@PROPERTY
@given(seed=SEED, m=st.integers(1, 12), alpha=st.floats(1.05, 2.0))
def test_subexpert_balanced_two_class_encoding_equals_balanced_winnow(
    seed: int, m: int, alpha: float
) -> None:
    xs, ys = _attribute_stream(_rng(seed), m, trials=300)
    se = SubExpert({"kind": "balanced-winnow", "alpha": alpha}, n_experts=m, labels=(1, -1))
    bw = BalancedWinnow(n_features=m, alpha=alpha, update_on_zero_margin=False, labels=(1, -1))
    for t, (x, y) in enumerate(zip(xs, ys, strict=True)):
        # x^(1) = x, x^(2) = 0: sub-expert i votes x_i for class 0 and nothing for class 1.
        e = Experts(x.indices, np.zeros(len(x), dtype=np.int64), x.values)
        assert se.predict(e) == bw.predict(x), f"trial {t}"
        out_se, out_bw = se.learn(e, y), bw.learn(x, y)
        assert out_se.mistake == out_bw.mistake, f"trial {t}"
        # On an all-zero instance a mistake changes no weight, so neither form counts an
        # update there (z = 0 in the sub-expert form): the flags agree on every trial.
        assert out_se.updated == out_bw.updated, f"trial {t}"
    assert (se.trials_, se.mistakes_) == (bw.trials_, bw.mistakes_)
    np.testing.assert_allclose(se.learner_.w_pos_, bw.w_pos_, rtol=1e-12)
    np.testing.assert_allclose(se.learner_.w_neg_, bw.w_neg_, rtol=1e-12)


# -- 3. Committee (k = 2, one-hot) == Weighted Majority (on_mistake, beta = alpha^-2) -------


@PROPERTY
@given(seed=SEED, log2_n=st.integers(1, 5))
def test_committee_one_hot_k2_equals_weighted_majority(seed: int, log2_n: int) -> None:
    # With alpha = 2 and n a power of two every weight and every vote total is a dyadic
    # number, so the frequent exact ties of one-hot votes are exact in both learners.
    n = 2**log2_n
    alpha = 2.0
    rng = _rng(seed)
    trials = 300
    ys = rng.integers(0, 2, size=trials)
    accuracy = rng.uniform(0.2, 0.9, size=n)  # each expert is right with its own rate
    right = rng.random(size=(trials, n)) < accuracy
    votes = np.where(right, ys[:, None], 1 - ys[:, None])
    committee = Committee(n_experts=n, labels=[0, 1], alpha=alpha)
    wm = WeightedMajority(n_experts=n, labels=[0, 1], beta=alpha**-2, update="on_mistake")
    for t, (v, y) in enumerate(zip(votes, ys, strict=True)):
        x = Experts.one_hot(v)
        assert committee.predict(x) == wm.predict(x), f"trial {t}"
        assert committee.learn(x, int(y)) == wm.learn(x, int(y)), f"trial {t}"
    assert committee.counters() == wm.counters()
    u = wm.weights()
    np.testing.assert_allclose(committee.weights(), u / u.sum(), rtol=1e-12)


# -- 4. Balanced Winnow w+ w- = 1; Committee weights sum to 1 ----------------------------


@PROPERTY
@given(
    seed=SEED,
    m=st.integers(1, 20),
    alpha=st.floats(1.01, 2.0),
    zero_update=st.booleans(),
)
def test_balanced_winnow_product_invariant(
    seed: int, m: int, alpha: float, zero_update: bool
) -> None:
    xs, ys = _attribute_stream(_rng(seed), m, trials=400)
    bw = BalancedWinnow(n_features=m, alpha=alpha, update_on_zero_margin=zero_update)
    for t, (x, y) in enumerate(zip(xs, ys, strict=True)):
        bw.learn(x, y)
        product = bw.w_pos_ * bw.w_neg_
        assert np.abs(product - 1.0).max() <= 1e-9, f"trial {t}"
    assert bw.updates_ > 0


def test_balanced_winnow_product_invariant_batch() -> None:
    rng = _rng(2024)
    xs, ys = _attribute_stream(rng, 30, trials=20_000)
    bw = BalancedWinnow(n_features=30, alpha=1.3)
    bw.learn_many(xs, ys)
    assert bw.updates_ > 1000
    np.testing.assert_allclose(bw.w_pos_ * bw.w_neg_, 1.0, rtol=1e-9)


@pytest.mark.parametrize("alpha", [1.05, 1.5, 3.0])
def test_committee_weights_sum_to_one_after_every_update(alpha: float) -> None:
    rng = _rng(99, int(alpha * 100))
    n, k, trials = 40, 3, 12_000
    c = Committee(n_experts=n, labels=range(k), alpha=alpha)
    worst, worst_trial = 0.0, -1
    for t in range(trials):
        v = rng.dirichlet(np.ones(k), size=n)  # each sub-expert votes a distribution
        v[rng.random(n) < 0.5] = 0.0  # and half of them abstain
        out = c.learn(v, int(rng.integers(k)))  # random labels: many updates
        if out.updated:
            w = c.weights()
            assert (w > 0).all(), f"trial {t}"
            if abs(w.sum() - 1.0) > worst:
                worst, worst_trial = abs(w.sum() - 1.0), t
    assert c.updates_ > 3 * 1024  # the exact recompute of the running sum ran
    assert worst <= 1e-12, f"|sum(w) - 1| = {worst:.3g} after trial {worst_trial}"
