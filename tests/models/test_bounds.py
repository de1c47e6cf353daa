"""Mistake-bound oracles over many seeds of noise-free streams.

The bounds: Committee's (Mesterharm 1999, Theorem 1), Balanced Winnow's (Mesterharm & Hsu,
eq. (1)), Winnow's (worked out from the proof sketch in the Winnow lecture notes, slides
31-41), the Perceptron's (Novikoff's (R/gamma)^2) and Weighted Majority's (Littlestone &
Warmuth 1994). Each test runs a learner on streams long enough for it to converge, asserts
that its mistakes never exceed the bound, and also that it does make mistakes and
settles down, so a learner that stopped counting (or stopped learning) cannot pass.

Committee, Winnow and Balanced Winnow learn most streams in their compiled runs of trials,
which test_batch_learn.py shows make the mistakes of one trial at a time; the sub-expert
Perceptron, Weighted Majority, the majority-problem check and the lecture's Winnow target
learn one trial at a time.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from models.core.instance import AttributeBatch, Attributes, ExpertBatch, Experts
from models.inputs.datasets import MajorityProblem
from models.learners.balanced import BalancedWinnow
from models.learners.committee import Committee
from models.learners.weighted_majority import WeightedMajority
from models.learners.winnow import Winnow
from models.wrappers.subexpert import SubExpert

SEEDS = range(30)


def _run(learner, xs, ys) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Learn the trials in order; return the mistake flags (and check the counter)."""
    flags = np.array([learner.learn(x, y).mistake for x, y in zip(xs, ys, strict=True)])
    assert learner.mistakes_ == int(flags.sum())
    assert learner.trials_ == len(flags)
    return flags


def _run_together(learner: Committee | Winnow, xs: Any, ys: list[int]) -> np.ndarray:
    """:func:`_run` in the learner's compiled run of the trials (a batch)."""
    if isinstance(learner, Winnow):
        flags, _, done = learner.learn_prefix(xs, ys)
    else:
        flags, _, done = learner.learn_expert_prefix(xs, ys)
    assert done == len(ys)  # neither learner refuses an update
    assert learner.mistakes_ == int(flags.sum())
    assert learner.trials_ == len(flags)
    return flags


# -- instances made together: the rows of one batch, as a learner's batch path takes them --


def _one_hot_batch(votes: np.ndarray) -> ExpertBatch:
    """The batch of ``Experts.one_hot`` of each row of the int64 matrix ``votes``."""
    trials, n = votes.shape
    ptr = np.arange(0, trials * n + 1, n, dtype=np.int64)
    experts = np.tile(np.arange(n, dtype=np.int64), trials)
    return ExpertBatch.trusted(ptr, experts, votes.ravel(), np.ones(trials * n))


def _one_hot_rows(votes: np.ndarray) -> list[Experts]:
    """``Experts.one_hot`` of each row of ``votes`` (classes 0 and 1), made together."""
    b = _one_hot_batch(votes)
    trials, n = votes.shape
    ones = np.ones(trials)
    classes = votes.max(axis=1) + 1
    return Experts.rows(b.expert, b.cls, b.value, b.indptr, np.full(trials, n), classes, ones, ones)


def _one_hot(votes: np.ndarray) -> Experts:
    """``Experts.one_hot(votes)`` of a fresh int64 array of classes 0 and 1, unchecked."""
    n = votes.size
    return Experts.row(np.arange(n), votes, np.ones(n), n, int(votes.max()) + 1, 1.0, 1.0)


def _csr(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The row pointers and column indices of the True entries of the matrix ``x``."""
    indptr = np.zeros(x.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.count_nonzero(x, axis=1), out=indptr[1:])
    return indptr, np.flatnonzero(x) % x.shape[1]


def _binary_rows(x: np.ndarray) -> list[Attributes]:
    """The attributes of each row of the boolean matrix ``x`` (value 1 where True), made
    together."""
    indptr, cols = _csr(x)
    on = x.any(axis=1)
    sizes = np.where(on, x.shape[1] - np.argmax(x[:, ::-1], axis=1), 0)
    bounds = on.astype(float)
    return Attributes.rows(cols, np.ones(cols.size), indptr, sizes, bounds, bounds)


def test_instances_made_together_are_those_made_one_by_one() -> None:
    """The helpers above make the instances the constructors make, extents and ranges
    included."""
    rng = np.random.default_rng(0)
    votes = rng.integers(0, 2, size=(50, 7))
    votes[0], votes[1] = 0, 1  # every vote for one class
    together: list[Any] = _one_hot_rows(votes)
    alone: list[Any] = [Experts.one_hot(v) for v in votes]
    together += [_one_hot(v.copy()) for v in votes]
    alone += [Experts.one_hot(v) for v in votes]
    x = rng.random((50, 9)) < 0.3
    x[0], x[1], x[2, -1] = False, True, True  # an empty row, a full one, the last on
    together += _binary_rows(x)
    alone += [Attributes(np.flatnonzero(r), np.ones(int(r.sum()))) for r in x]
    for got, want in zip(together, alone, strict=True):
        assert type(got) is type(want)
        if isinstance(want, Experts):
            arrays, extent = ("expert", "cls", "value"), ("size", "n_classes", "low", "high")
        else:
            arrays, extent = ("indices", "values"), ("size", "low", "high")
        for name in arrays:
            a, b = getattr(got, name), getattr(want, name)
            assert a.dtype == b.dtype and np.array_equal(a, b), name
            assert not a.flags.writeable, name
        for name in extent:
            assert getattr(got, name) == getattr(want, name), name
    batch, joined = _one_hot_batch(votes), ExpertBatch.from_instances(alone[: len(votes)])
    for name in ("indptr", "expert", "cls", "value"):
        a, b = getattr(batch, name), getattr(joined, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    for name in ("size", "n_classes", "low", "high"):
        assert getattr(batch, name) == getattr(joined, name), name


# -- Committee and sub-expert Perceptron: majority of 3 one-hot sub-experts, k = 2 -------


def _majority_of_three(
    n_experts: int, trials: int, rng: np.random.Generator
) -> tuple[np.ndarray, list[int]]:
    """Each sub-expert's one-hot vote (its class) in each trial, and the labels:
    sub-experts 0, 1, 2 are relevant; the label is their majority (never a tie)."""
    votes = rng.integers(0, 2, size=(trials, n_experts))
    ys = (votes[:, :3].sum(axis=1) >= 2).astype(int)
    return votes, ys.tolist()


MAJORITY_TRIALS = 5000
MAJORITY_FRESH = 1000


@pytest.mark.parametrize(("n_experts", "bound"), [(10, 41.4), (50, 70.4), (100, 82.9)])
def test_committee_majority_of_three_bound(n_experts: int, bound: float) -> None:
    # Mesterharm 1999, Theorem 1: delta = 1/3, alpha = (1 - delta)^(-1/2),
    # M <= 2 ln N / delta^2 = 18 ln N.
    assert 18 * math.log(n_experts) == pytest.approx(bound, abs=0.05)
    alpha = (2 / 3) ** -0.5
    totals = []
    for seed in SEEDS:
        rng = np.random.default_rng([1, n_experts, seed])
        votes, ys = _majority_of_three(n_experts, MAJORITY_TRIALS, rng)
        c = Committee(n_experts=n_experts, labels=[0, 1], alpha=alpha)
        flags = _run_together(c, _one_hot_batch(votes), ys)
        assert flags.sum() <= 18 * math.log(n_experts), f"seed {seed}"
        assert flags.sum() >= 3, f"seed {seed}: suspiciously few mistakes"
        totals.append(flags.sum())
        votes, fy = _majority_of_three(n_experts, MAJORITY_FRESH, rng)
        # the learner's predictions, all at once: its snapshot's (test_checks.py)
        decided = c.decide_many(_one_hot_rows(votes))
        errors = sum(c.labels[k] != y for (k, _), y in zip(decided, fy, strict=True))
        assert errors <= 0.02 * MAJORITY_FRESH, f"seed {seed}: has not converged"
    assert np.mean(totals) >= 0.15 * bound


@pytest.mark.parametrize("n_experts", [10, 50, 100])
def test_subexpert_perceptron_majority_of_three_bound(n_experts: int) -> None:
    # Novikoff: ||z||^2 = N, gamma = 1/sqrt(3) for u = (1, 1, 1, 0, ...)/sqrt(3): M <= 3N.
    totals = []
    for seed in SEEDS:
        rng = np.random.default_rng([2, n_experts, seed])
        votes, ys = _majority_of_three(n_experts, MAJORITY_TRIALS, rng)
        se = SubExpert({"kind": "perceptron"}, n_experts=n_experts, labels=[0, 1])
        flags = _run(se, _one_hot_rows(votes), ys)  # one by one: it has no compiled run
        assert flags.sum() <= 3 * n_experts, f"seed {seed}"
        assert flags.sum() >= 3, f"seed {seed}: suspiciously few mistakes"
        totals.append(flags.sum())
        votes, fy = _majority_of_three(n_experts, MAJORITY_FRESH, rng)
        h = se.snapshot()
        errors = sum(h.predict(x) != y for x, y in zip(_one_hot_rows(votes), fy, strict=True))
        assert errors <= 0.05 * MAJORITY_FRESH, f"seed {seed}: has not converged"
    assert np.mean(totals) >= 0.15 * 3 * n_experts


# -- Committee on the majority problem's target: a sanity check (the bound is vacuous) ---


def test_committee_on_majority_problem_sanity() -> None:
    problem = MajorityProblem()  # n = 20, r = 10, k = 5, noise 0
    delta = 1 / 60
    alpha = (1 - delta) ** -0.5
    bound = 2 * math.log(problem.n_experts) / delta**2
    assert bound == pytest.approx(23176, abs=1)
    for seed in range(5):
        rng = np.random.default_rng([3, seed])
        xs, ys, clean = problem.sample(5000, rng)
        assert (ys == clean).all()
        c = Committee(n_experts=problem.n_experts, labels=range(problem.k), alpha=alpha)
        flags = _run(c, xs, ys.tolist())
        assert 0 < flags.sum() < bound
        # It is still learning at 5000 trials, but the later trials hold fewer mistakes.
        assert flags[-1000:].sum() < flags[:1000].sum()
        fx, _, fclean = problem.sample(5000, rng)
        h = c.snapshot()
        error = np.mean([h.predict(x) != y for x, y in zip(fx, fclean, strict=True)])
        assert error < 0.1, f"seed {seed}: final error {error}"


# -- Balanced Winnow, Mesterharm & Hsu eq. (1): y = +1 iff x1 + x2 + x3 >= 2, constant attr. --


def _balanced_bound(n: int) -> float:
    u = [2 / 9] * 3 + [1 / 3]
    delta = 1 / 9
    return 3.2 * (math.log(2 * n) + sum(a * math.log(a) for a in u)) / delta**2


def _at_least_two_of_three(n: int, trials: int, rng: np.random.Generator):  # type: ignore[no-untyped-def]
    """Attributes 0..n-2 binary (relevant 0, 1, 2 at density 1/2, the others at a random
    density), attribute n-1 the constant 1; labels +1 / -1."""
    density = rng.uniform(0.1, 0.5)
    x = rng.random((trials, n)) < density
    x[:, :3] = rng.random((trials, 3)) < 0.5
    x[:, -1] = True
    ys = np.where(x[:, :3].sum(axis=1) >= 2, 1, -1)
    indptr, cols = _csr(x)
    return AttributeBatch(indptr, cols, np.ones(cols.size)), ys.tolist()


BALANCED_TRIALS = 20_000


@pytest.mark.parametrize(("n", "bound"), [(10, 421.7), (50, 838.8), (100, 1018.5)])
def test_balanced_winnow_bound(n: int, bound: float) -> None:
    # u = (2/9, 2/9, 2/9, 0, ..., -1/3 on the constant), delta = 1/9, alpha = 1 + delta.
    assert _balanced_bound(n) == pytest.approx(bound, abs=0.05)
    for seed in SEEDS:
        rng = np.random.default_rng([4, n, seed])
        batch, ys = _at_least_two_of_three(n, BALANCED_TRIALS, rng)
        bw = BalancedWinnow(n_features=n, alpha=10 / 9)
        mistakes, updates = bw.learn_many(batch, ys)
        assert bw.mistakes_ == mistakes.sum()
        assert mistakes.sum() <= _balanced_bound(n), f"seed {seed}"
        assert mistakes.sum() >= 10, f"seed {seed}: suspiciously few mistakes"
        assert (updates >= mistakes).all()  # every mistake updates (Fig. 1)
        # Converged: the last quarter of the stream holds under 1% mistakes.
        assert mistakes[-BALANCED_TRIALS // 4 :].mean() < 0.01, f"seed {seed}"


# -- Winnow: monotone k-disjunction, alpha = 2, theta = n -----------------------------


def _disjunction(n: int, k: int, trials: int, rng: np.random.Generator):  # type: ignore[no-untyped-def]
    """k random relevant attributes, each on with probability 1 - 2^(-1/k) (so half the
    labels are +1); irrelevant attributes on with probability 0.1."""
    relevant = rng.choice(n, size=k, replace=False)
    x = rng.random((trials, n)) < 0.1
    x[:, relevant] = rng.random((trials, k)) < 1 - 0.5 ** (1 / k)
    ys = np.where(x[:, relevant].any(axis=1), 1, -1)
    indptr, cols = _csr(x)
    return AttributeBatch(indptr, cols, np.ones(cols.size)), ys.tolist()


WINNOW_TRIALS = 2000


@pytest.mark.parametrize(("n", "k"), [(64, 1), (64, 4), (256, 2), (256, 8), (1024, 1), (1024, 6)])
def test_winnow_disjunction_bound(n: int, k: int) -> None:
    bound = 3 * k * (1 + math.log2(n)) + 2
    for seed in SEEDS:
        rng = np.random.default_rng([5, n, k, seed])
        batch, ys = _disjunction(n, k, WINNOW_TRIALS, rng)
        w = Winnow(n_features=n, alpha=2.0, theta=float(n))
        flags = _run_together(w, batch, ys)
        assert flags.sum() <= bound, f"seed {seed}"
        assert flags.sum() >= k + 3, f"seed {seed}: suspiciously few mistakes"
        assert flags[-WINNOW_TRIALS // 4 :].mean() < 0.01, f"seed {seed}: has not converged"


def test_winnow_s1_disjunction_bound() -> None:
    # The lecture's target x1 v x2 v x1023 v x1024 over n = 1024: at most 134 mistakes.
    assert 3 * 4 * (1 + math.log2(1024)) + 2 == 134
    relevant = [0, 1, 1022, 1023]
    for seed in range(10):
        rng = np.random.default_rng([6, seed])
        x = rng.random((WINNOW_TRIALS, 1024)) < 0.05
        x[:, relevant] = rng.random((WINNOW_TRIALS, 4)) < 1 - 0.5 ** (1 / 4)
        ys = np.where(x[:, relevant].any(axis=1), 1, -1).tolist()
        xs = _binary_rows(x)
        w = Winnow(n_features=1024, alpha=2.0, theta=1024.0)
        flags = _run(w, xs, ys)  # one by one
        assert 5 <= flags.sum() <= 134, f"seed {seed}"


# -- Weighted Majority with a perfect (or nearly perfect) expert among 10 ----------------


def _wm_bound(v: int, m: int, beta: float) -> float:
    return (math.log(v) + m * math.log(1 / beta)) / math.log(2 / (1 + beta))


def _adversarial_wm_run(
    wm: WeightedMajority, best: int, budget: int, trials: int, rng: np.random.Generator
) -> tuple[int, np.ndarray]:
    """Drive ``wm`` with random other experts and an adaptive label.

    Expert ``best`` is right except on ``budget`` trials. On each trial the adversary looks
    at the master's prediction for both possible votes of ``best`` and picks one that makes
    the master wrong while ``best`` is right; failing that, it spends one of ``best``'s
    mistakes (if any are left) to make the master wrong anyway.
    Returns the master's mistakes and every expert's mistakes.
    """
    v = wm.n_experts
    expert_mistakes = np.zeros(v, dtype=int)
    for _ in range(trials):
        others = rng.integers(0, 2, size=v)
        options = []
        for vote in (0, 1):
            votes = others.copy()
            votes[best] = vote
            x = _one_hot(votes)
            options.append((x, votes, vote, wm.predict(x)))
        erring = [o for o in options if o[3] != o[2]]
        if erring:
            x, votes, vote, _ = erring[rng.integers(len(erring))]
            y = vote
        elif budget > 0:
            x, votes, vote, pred = options[rng.integers(2)]
            y = 1 - pred  # pred == vote here, so best is wrong too
            budget -= 1
        else:
            x, votes, vote, _ = options[rng.integers(2)]
            y = vote
        expert_mistakes += votes != y
        wm.learn(x, y)
    assert budget == 0, "the stream was too short to spend the best expert's mistakes"
    return wm.mistakes_, expert_mistakes


@pytest.mark.parametrize("update", ["every_trial", "on_mistake"])
@pytest.mark.parametrize(("m", "bound"), [(0, 8.00), (5, 20.05)])
def test_weighted_majority_bound(update: str, m: int, bound: float) -> None:
    beta = 0.5
    assert _wm_bound(10, m, beta) == pytest.approx(bound, abs=0.005)
    totals = []
    for seed in range(50):
        rng = np.random.default_rng([7, m, seed])
        best = int(rng.integers(10))
        wm = WeightedMajority(n_experts=10, labels=[0, 1], beta=beta, update=update)
        mistakes, per_expert = _adversarial_wm_run(wm, best, m, 300, rng)
        assert per_expert[best] == m
        assert mistakes <= _wm_bound(10, m, beta), f"seed {seed}"
        assert mistakes <= _wm_bound(10, int(per_expert.min()), beta), f"seed {seed}"
        assert mistakes >= 1 + m, f"seed {seed}: the adversary should force mistakes"
        totals.append(mistakes)
    assert np.mean(totals) >= 0.25 * bound
