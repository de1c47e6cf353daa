"""ALMA_p (Gentile 2001): short traces, the link functions, and dual == primal.

The traces were worked out by hand from the rule (Gentile 2001, with the p-norm link of
Gentile 2003): they check the code against the rule, not against numbers in the paper.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from models.core.params import VALUE_LIMIT, InvalidParameter
from models.core.state import InvalidState
from models.learners.alma import ALMA, inverse_link, link

SQRT2 = math.sqrt(2)


def _norm(v: np.ndarray, r: float) -> float:
    return float(np.sum(np.abs(v) ** r) ** (1.0 / r))


def _naive_link(v: np.ndarray, r: float) -> np.ndarray:
    """sign(v_i)|v_i|^(r-1) / ||v||_r^(r-2), written out without any rescaling."""
    n = _norm(v, r)
    return np.zeros_like(v) if n == 0 else np.sign(v) * np.abs(v) ** (r - 1) / n ** (r - 2)


class PrimalALMA:
    """Dense O(n) reference: the primal rule of Gentile 2001 step by step."""

    def __init__(self, n: int, p: float, alpha: float = 0.9, C: float = SQRT2) -> None:
        self.p, self.q = p, p / (p - 1)
        self.alpha, self.B, self.C = alpha, 1 / alpha, C
        self.w = np.zeros(n)
        self.k = 1

    def fit(self, x: np.ndarray, y: int, force: bool = False) -> tuple[int, bool]:
        if not x.any():
            return 1, False
        pred = 1 if self.w @ x >= 0 else -1
        xh = x / _norm(x, self.p)
        gamma = self.B * math.sqrt(self.p - 1) / math.sqrt(self.k)
        if not (force or y * (self.w @ xh) <= (1 - self.alpha) * gamma):
            return pred, False
        eta = self.C / (math.sqrt(self.p - 1) * math.sqrt(self.k))
        w = _naive_link(_naive_link(self.w, self.q) + eta * y * xh, self.p)
        self.w = w / max(1.0, _norm(w, self.q))
        self.k += 1
        return pred, True


def _sparse(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    idx = np.flatnonzero(x)
    return idx.astype(np.int64), x[idx].astype(np.float64)


def _close(a: np.ndarray, b: np.ndarray, rel: float = 1e-9) -> bool:
    scale = max(float(np.abs(b).max(initial=0.0)), 1e-300)
    return float(np.abs(a - b).max(initial=0.0)) <= rel * scale


# -- traces (alpha = 0.9, B = 1/0.9, C = sqrt 2), worked out by hand from the rule --------

TRACES = {
    # p: [(x, y, y * w.x̂ before, w after)], every step updates; a 4th, derived step does not.
    2.0: [
        ((1.0, 0.0), 1, 0.0, (1.0, 0.0)),
        ((0.0, 1.0), -1, 0.0, (0.707107, -0.707107)),
        ((1.0, 1.0), 1, 0.0, (0.994936, -0.100509)),
    ],
    3.0: [
        ((1.0, 0.0), 1, 0.0, (1.0, 0.0)),
        ((0.5, 1.0), -1, -0.480750, (0.516025, -0.547487)),
        ((1.0, 1.0), 1, -0.024972, (0.994843, -0.039078)),
    ],
}
THETAS_P3 = [(1.0, 0.0), (0.660059, -0.679883), (0.997418, -0.197681)]
GAMMAS = {2.0: [1.111111, 0.785674, 0.641500], 3.0: [1.571348, None, None]}


@pytest.mark.parametrize("p", [2.0, 3.0])
def test_trace(p: float) -> None:
    alma = ALMA(n_features=2, p=p)
    for step, (x, y, margin, w) in enumerate(TRACES[p]):
        x = np.array(x)
        assert alma.k_ == step + 1
        if GAMMAS[p][step] is not None:
            assert alma.gamma_ == pytest.approx(GAMMAS[p][step], abs=1e-5)
        assert y * alma.margin(x) / _norm(x, p) == pytest.approx(margin, abs=1e-5)
        assert alma.learn(x, y).updated
        assert alma.k_ == step + 2
        np.testing.assert_allclose(alma.weights(), w, atol=1e-5)
        if p == 3.0:
            theta = alma.scalars_[0] * alma.phi_
            np.testing.assert_allclose(theta, THETAS_P3[step], atol=1e-5)
            np.testing.assert_allclose(link(alma.weights(), 1.5), THETAS_P3[step], atol=1e-5)
    q = p / (p - 1)
    assert _norm(alma.weights(), q) == pytest.approx(1.0, abs=1e-9)  # both traces end projected
    # Step 4 (derived): a comfortable margin, so no correction and k stays.
    before = alma.weights()
    out = alma.learn([1.0, 0.0], 1)
    assert not out.updated and not out.mistake
    assert alma.k_ == 4
    np.testing.assert_array_equal(alma.weights(), before)


def test_p3_step2_is_not_clipped() -> None:
    alma = ALMA(n_features=2, p=3.0)
    alma.learn([1.0, 0.0], 1)
    alma.learn([0.5, 1.0], -1)
    assert _norm(alma.weights(), 1.5) == pytest.approx(0.844295, abs=1e-5)
    assert alma.scalars_[0] == 1.0  # c untouched: no projection happened


# -- link functions -------------------------------------------------------------------


@pytest.mark.parametrize("p", [2.0, 2.5, 3.0, 4.0, 9.0])
def test_link_identities(p: float) -> None:
    q = p / (p - 1)
    rng = np.random.default_rng(int(p * 10))
    for _ in range(50):
        theta = rng.normal(size=12) * rng.choice([1e-3, 1.0, 1e3])
        theta[rng.random(12) < 0.3] = 0.0
        w = inverse_link(theta, p)
        assert _norm(w, q) == pytest.approx(_norm(theta, p), rel=1e-12)
        np.testing.assert_allclose(link(w, q), theta, rtol=1e-10, atol=1e-12 * _norm(theta, p))
        np.testing.assert_allclose(inverse_link(link(w, q), p), w, rtol=1e-10, atol=1e-300)
        np.testing.assert_allclose(w, _naive_link(theta, p), rtol=1e-12, atol=1e-300)
    zero = np.zeros(4)
    assert not link(zero, q).any() and not inverse_link(zero, p).any()
    if p == 2.0:
        np.testing.assert_array_equal(inverse_link(theta, p), theta)


def test_link_does_not_mutate_and_survives_large_values() -> None:
    theta = np.array([1e200, -3e199, 0.0])
    copy = theta.copy()
    w = inverse_link(theta, 9.0)
    np.testing.assert_array_equal(theta, copy)
    assert np.isfinite(w).all()
    assert _norm(w / 1e200, 9 / 8) == pytest.approx(_norm(theta / 1e200, 9.0), rel=1e-12)


# -- dual O(active) form == dense primal reference -------------------------------------


def _stream(rng: np.random.Generator, n: int, trials: int) -> list[tuple[np.ndarray, int]]:
    target = rng.normal(size=n)
    out = []
    for _ in range(trials):
        x = np.zeros(n)
        act = rng.choice(n, size=int(rng.integers(1, 7)), replace=False)
        x[act] = rng.normal(size=act.size) * rng.choice([0.1, 1.0, 5.0])
        y = 1 if target @ x >= 0 else -1
        if rng.random() < 0.1:
            y = -y
        out.append((x, y))
    return out


def _run_both(
    alma: ALMA, ref: PrimalALMA, stream: list[tuple[np.ndarray, int]], force_every: int = 0
) -> int:
    updates = 0
    for t, (x, y) in enumerate(stream):
        force = force_every > 0 and t % force_every == 0
        got = alma._fit(*_sparse(x), y, force)
        want = ref.fit(x, y, force)
        assert got == want, f"trial {t}: dual {got} != primal {want}"
        assert alma.k_ == ref.k
        assert _close(alma.weights(), ref.w), f"trial {t}: weights differ"
        updates += got[1]
    return updates


@pytest.mark.parametrize("p", [2.0, 2.5, 4.0, 9.0])
def test_dual_equals_primal(p: float) -> None:
    rng = np.random.default_rng(7 + int(p * 2))
    alma, ref = ALMA(n_features=30, p=p), PrimalALMA(30, p)
    updates = _run_both(alma, ref, _stream(rng, 30, 400), force_every=17)
    assert 50 < updates < 400  # both margin updates and skipped trials occurred


@pytest.mark.parametrize("p", [2.0, 4.0])
def test_dual_equals_primal_through_learn(p: float) -> None:
    rng = np.random.default_rng(3)
    alma, ref = ALMA(n_features=20, p=p, labels=("yes", "no")), PrimalALMA(20, p)
    for x, y in _stream(rng, 20, 300):
        pred, updated = ref.fit(x, y)
        out = alma.learn(dict(zip(*_sparse(x), strict=True)), "yes" if y > 0 else "no")
        assert out == (pred != y, updated)
        assert alma.predict(x) == ("yes" if ref.w @ x >= 0 else "no")
    assert _close(alma.weights(), ref.w)
    assert _close(alma.snapshot().weights, ref.w)


@pytest.mark.parametrize("p", [2.0, 9.0, 64.0])
def test_many_updates_cross_the_periodic_recompute(p: float) -> None:
    rng = np.random.default_rng(11)
    alma, ref = ALMA(n_features=12, p=p), PrimalALMA(12, p)
    for t, (x, y) in enumerate(_stream(rng, 12, 4300)):
        assert alma._fit(*_sparse(x), y, True) == ref.fit(x, y, True)
        if t % 500 == 0 or 4090 <= t <= 4100:
            assert _close(alma.weights(), ref.w), f"trial {t}"
    assert alma.k_ == ref.k == 4301
    assert _close(alma.weights(), ref.w)


@pytest.mark.parametrize("p", [2.0, 2.5, 9.0])
def test_frequent_recompute_and_fold_match_primal(p: float) -> None:
    rng = np.random.default_rng(5)
    alma, ref = ALMA(n_features=25, p=p), PrimalALMA(25, p)
    alma._recompute_every = 3  # type: ignore[misc]
    alma._fold_below = 2.0  # type: ignore[misc]  # c**p < 2 always: fold on every update
    _run_both(alma, ref, _stream(rng, 25, 300), force_every=5)
    assert alma.scalars_[0] <= 1.0


def test_tampered_s_is_repaired_by_the_periodic_recompute() -> None:
    alma = ALMA(n_features=8, p=4.0)
    alma._recompute_every = 10  # type: ignore[misc]
    rng = np.random.default_rng(2)
    stream = _stream(rng, 8, 10)
    for x, y in stream[:9]:
        alma._fit(*_sparse(x), y, True)
    assert alma.k_ == 10
    alma.scalars_[1] *= 1.01
    alma._fit(*_sparse(stream[9][0]), stream[9][1], True)
    assert alma.k_ == 11
    assert alma.scalars_[1] == pytest.approx(np.sum(np.abs(alma.phi_) ** 4.0), rel=1e-13)


def test_fold_keeps_large_p_finite() -> None:
    # Mostly aligned corrections keep projecting theta, so c falls like exp(-sqrt(k)) and
    # S ~ c**-p would overflow for p = 64 within a few thousand corrections without folding.
    alma, ref = ALMA(n_features=3, p=64.0), PrimalALMA(3, 64.0)
    x = np.array([1.0, 0.5, 0.0])
    folds = 0
    for t in range(5000):
        y = -1 if t % 7 == 6 else 1
        c = alma.scalars_[0]
        assert alma._fit(*_sparse(x), y, True) == ref.fit(x, y, True)
        folds += alma.scalars_[0] > c
        assert _close(alma.weights(), ref.w, rel=1e-8), f"trial {t}"
    assert folds >= 2
    assert np.isfinite(alma.phi_).all() and np.isfinite(alma.scalars_).all()


# -- edge cases ------------------------------------------------------------------------


def test_zero_instance_predicts_plus_one_and_never_learns() -> None:
    alma = ALMA(n_features=3)
    empty_i, empty_v = np.zeros(0, dtype=np.int64), np.zeros(0)
    assert alma._fit(empty_i, empty_v, -1, True) == (1, False)
    assert alma.learn([0.0, 0.0, 0.0], -1) == (True, False)
    assert alma.k_ == 1 and not alma.weights().any()


def test_negative_values_and_input_not_mutated() -> None:
    alma = ALMA(n_features=4, p=2.5)
    idx, val = np.array([0, 3]), np.array([-0.5, 0.25])
    copies = idx.copy(), val.copy()
    assert alma._fit(idx, val, 1, False) == (1, True)  # subexpert-style z with negatives
    np.testing.assert_array_equal(idx, copies[0])
    np.testing.assert_array_equal(val, copies[1])
    assert alma.margin({0: -0.5, 3: 0.25}) > 0
    np.testing.assert_array_equal(alma.weights_at(idx), alma.weights()[idx])


# -- state -----------------------------------------------------------------------------


def _trained(p: float = 2.5) -> tuple[ALMA, list[tuple[np.ndarray, int]]]:
    rng = np.random.default_rng(1)
    alma = ALMA(n_features=15, p=p, alma_alpha=0.8, C=1.0)
    stream = _stream(rng, 15, 400)
    alma.learn_many([x for x, _ in stream[:200]], [y for _, y in stream[:200]])
    return alma, stream[200:]


def test_state_round_trip() -> None:
    alma, rest = _trained()
    doc = json.loads(json.dumps(alma.export_state()))
    other = ALMA(n_features=15, p=2.5, alma_alpha=0.8, C=1.0)
    other.import_state(doc)
    assert other.counters() == alma.counters()
    np.testing.assert_array_equal(other.weights(), alma.weights())
    for x, y in rest:
        assert other.predict(x) == alma.predict(x)
        assert other.learn(x, y) == alma.learn(x, y)
    np.testing.assert_array_equal(other.weights(), alma.weights())
    np.testing.assert_array_equal(other.scalars_, alma.scalars_)


@pytest.mark.parametrize(
    ("slot", "value"), [(0, 0.0), (0, 1.5), (1, -1.0), (1, 1e9), (2, 0.0), (2, 2.5)]
)
def test_import_rejects_bad_scalars(slot: int, value: float) -> None:
    alma, _ = _trained()
    doc = alma.export_state()
    before = alma.weights()
    other = ALMA(n_features=15, p=2.5, alma_alpha=0.8, C=1.0)
    other.import_state(doc)
    scalars = other.scalars_.copy()
    scalars[slot] = value
    other.scalars_ = scalars
    bad = other.export_state()
    with pytest.raises(InvalidState):
        alma.import_state(bad)
    np.testing.assert_array_equal(alma.weights(), before)  # unchanged after a refused import


def test_import_rejects_phi_that_disagrees_with_s() -> None:
    alma, _ = _trained()
    doc = alma.export_state()
    other = ALMA(n_features=15, p=2.5, alma_alpha=0.8, C=1.0)
    other.import_state(doc)
    other.phi_ = other.phi_ * 2.0
    with pytest.raises(InvalidState, match="does not match"):
        alma.import_state(other.export_state())


# -- parameters ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [("p", 1.5), ("p", 100.0), ("alma_alpha", 0.0), ("alma_alpha", 1.5), ("B", -1.0), ("C", 0.0)],
)
def test_bad_parameters(name: str, value: float) -> None:
    with pytest.raises(InvalidParameter, match=name) as info:
        ALMA(n_features=3, **{name: value})
    assert info.value.name == name


def test_params_and_defaults() -> None:
    alma = ALMA(n_features=3, p=4, alma_alpha=1.0)
    assert alma.get_params() == {
        "n_features": 3,
        "p": 4,
        "alma_alpha": 1.0,
        "B": None,
        "C": SQRT2,
        "labels": (1, -1),
    }
    assert alma.gamma_ == pytest.approx(1.0 * math.sqrt(3))  # B = 1/alma_alpha
    assert ALMA(n_features=3, B=2.0).gamma_ == pytest.approx(2.0)
    assert ALMA.margin_based and ALMA.value_range == (-VALUE_LIMIT, VALUE_LIMIT)
    assert ALMA.kind == "alma"
