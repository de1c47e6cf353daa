"""Known-answer tests from the worked examples of the lecture notes and papers.

The Winnow disjunction trace of the lecture notes Multiplicative Updates & the Winnow
Algorithm (slides 16-19), the weather, Balanced Winnow and multi-class Winnow examples of
Savoy's Advanced Linear Models, and two hand examples for Committee (Mesterharm 1999, §3)
and the sub-expert conversion (Mesterharm & Hsu, §III). Every expected number is copied from
the slides or worked out by hand from the rule as written (exactly, with fractions, for
Committee); none is produced by the code under test. The ALMA traces live in test_alma.py.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from models.core.instance import Attributes, attributes_as_experts
from models.learners.balanced import BalancedWinnow
from models.learners.committee import Committee
from models.learners.multiclass_winnow import MulticlassWinnow
from models.learners.winnow import Winnow
from models.wrappers.subexpert import SubExpert

# -- Winnow disjunction trace, Winnow lecture slides 16-19 (n = theta = 1024, alpha = 2) ---

N_DISJ = 1024

# (active attributes, 1-based; y; w.x before; predicted; w after: first five and the last)
DISJUNCTION_TRACE = [
    ("all", 1, 1024, 1, (1, 1, 1, 1, 1), 1),
    ((), -1, 0, -1, (1, 1, 1, 1, 1), 1),
    ((3, 4, 5), -1, 3, -1, (1, 1, 1, 1, 1), 1),
    ((1,), 1, 1, -1, (2, 1, 1, 1, 1), 1),
    ((2,), 1, 1, -1, (2, 2, 1, 1, 1), 1),
    ((1, 2, 3), 1, 5, -1, (4, 4, 2, 1, 1), 1),
    ((1, 1024), 1, 5, -1, (8, 4, 2, 1, 1), 2),
]


def _disjunction_instance(active: str | tuple[int, ...]) -> np.ndarray:
    x = np.zeros(N_DISJ)
    if active == "all":
        x[:] = 1.0
    else:
        x[[i - 1 for i in active]] = 1.0
    return x


def test_winnow_disjunction_trace_first_seven_rows() -> None:
    w = Winnow(n_features=N_DISJ, alpha=2.0, theta=1024.0, strict=False)
    for row, (active, y, score, predicted, first5, last) in enumerate(DISJUNCTION_TRACE, 1):
        x = _disjunction_instance(active)
        before = w.weights()
        assert w.margin(x) + 1024 == score, f"row {row}: w.x"
        assert w.predict(x) == predicted, f"row {row}: prediction"
        outcome = w.learn(x, y)
        assert outcome.mistake == (predicted != y), f"row {row}: mistake flag"
        assert outcome.updated == (predicted != y), f"row {row}: updated flag"
        after = w.weights()
        assert after[:5].tolist() == list(first5), f"row {row}: first five weights"
        assert after[-1] == last, f"row {row}: last weight"
        # The weights the slide elides ("...") are untouched: all 1 except those it lists.
        middle = after[5:-1]
        assert (middle == 1.0).all(), f"row {row}: an unlisted weight changed"
        if predicted == y:
            assert (after == before).all(), f"row {row}: changed on a correct prediction"
    assert w.mistakes_ == 4
    assert w.updates_ == 4
    assert w.trials_ == 7


# -- Advanced Linear Models' weather example (Winnow, alpha = theta = 2, w = 1, strict >) --

# The lecture's data table, in order: sunny, overcast, rainy, hot, mild, cool, high, normal,
# windy; label play (1 = yes).
WEATHER = {
    "A1": ((1, 0, 0, 1, 0, 0, 1, 0, 0), 0),
    "A2": ((1, 0, 0, 1, 0, 0, 1, 0, 1), 0),
    "A3": ((0, 1, 0, 1, 0, 0, 1, 0, 0), 1),
    "A4": ((0, 0, 1, 0, 1, 0, 1, 0, 0), 1),
    "A5": ((0, 0, 1, 0, 0, 1, 0, 1, 0), 1),
    "A6": ((0, 0, 1, 0, 0, 1, 0, 1, 1), 0),
    "A7": ((0, 1, 0, 0, 0, 1, 0, 1, 1), 1),
    "A8": ((1, 0, 0, 0, 1, 0, 1, 0, 0), 0),
    "A9": ((1, 0, 0, 0, 0, 1, 0, 1, 0), 1),
    "A10": ((0, 0, 1, 0, 1, 0, 0, 1, 0), 1),
    "A11": ((1, 0, 0, 0, 1, 0, 0, 1, 1), 1),
    "A12": ((0, 1, 0, 0, 1, 0, 1, 0, 1), 1),
    "A13": ((0, 1, 0, 1, 0, 0, 0, 1, 0), 1),
    "A14": ((0, 0, 1, 0, 1, 0, 1, 0, 1), 0),
}


def _weather_winnow() -> Winnow:
    return Winnow(n_features=9, alpha=2.0, theta=2.0, strict=True, labels=(1, 0))


def test_weather_slide_trace_a1_a11_a6_a14() -> None:
    w = _weather_winnow()
    # (name, score before, predicted, weights after)
    steps = [
        ("A1", 3.0, 1, (0.5, 1, 1, 0.5, 1, 1, 0.5, 1, 1)),
        ("A11", 3.5, 1, (0.5, 1, 1, 0.5, 1, 1, 0.5, 1, 1)),
        ("A6", 4.0, 1, (0.5, 1, 0.5, 0.5, 1, 0.5, 0.5, 0.5, 0.5)),
        ("A14", 2.5, 1, (0.5, 1, 0.25, 0.5, 0.5, 0.5, 0.25, 0.5, 0.25)),
    ]
    for name, score, predicted, expected in steps:
        x, y = WEATHER[name]
        assert w.margin(x) + 2.0 == score, name
        assert w.predict(x) == predicted, name
        outcome = w.learn(x, y)
        assert outcome.mistake == (predicted != y), name
        assert outcome.updated == (predicted != y), name
        assert w.weights().tolist() == list(expected), name


def test_weather_full_epoch_in_table_order() -> None:
    w = _weather_winnow()
    updated = set()
    for name, (x, y) in WEATHER.items():
        outcome = w.learn(x, y)
        assert outcome.updated == outcome.mistake, name
        if outcome.updated:
            updated.add(name)
    assert updated == {"A1", "A2", "A3", "A6", "A9", "A14"}
    assert w.weights().tolist() == [0.5, 2, 0.25, 0.5, 0.5, 1, 0.25, 1, 0.125]
    assert (w.trials_, w.mistakes_, w.updates_) == (14, 6, 6)


# -- Advanced Linear Models' Balanced Winnow example (alpha = theta = 2, w+ = 1, w- = 0.5) -


def test_balanced_winnow_s2_example() -> None:
    bw = BalancedWinnow(
        n_features=9,
        alpha=2.0,
        theta=2.0,
        init_pos=1.0,
        init_neg=0.5,
        strict=True,
        labels=(1, 0),
    )
    x3, y3 = WEATHER["A3"]
    assert bw.margin(x3) + 2.0 == 1.5
    assert bw.predict(x3) == 0
    assert bw.learn(x3, y3) == (True, True)
    assert bw.w_pos_.tolist() == [1, 2, 1, 2, 1, 1, 2, 1, 1]
    assert bw.w_neg_.tolist() == [0.5, 0.25, 0.5, 0.25, 0.5, 0.5, 0.25, 0.5, 0.5]

    x12, y12 = WEATHER["A12"]
    assert bw.margin(x12) + 2.0 == 4.5
    assert bw.predict(x12) == 1
    assert bw.learn(x12, y12) == (False, False)
    assert bw.w_pos_.tolist() == [1, 2, 1, 2, 1, 1, 2, 1, 1]
    assert bw.w_neg_.tolist() == [0.5, 0.25, 0.5, 0.25, 0.5, 0.5, 0.25, 0.5, 0.5]


# -- Advanced Linear Models' multi-class Winnow example #8 (alpha = 2) ---------------------

K = 3
EX8 = (1.0, 0.06, 0.54, 0.18, 0.17, 0.11, 0.01)  # bias x0 = 1, then the six features

# The slide's rounded numbers (abs 5e-3) and the unrounded ones, worked out by hand from
# the lecture's rule (abs 1e-4).
EX8_SLIDE = {
    "scores_before": (1.07, 2.07, 3.07),
    "w2": (3.0, 1.12, 2.08, 1.36, 1.34, 1.22, 1.02),
    "w3": (0.67, 0.89, 0.48, 0.74, 0.75, 0.82, 0.98),
    "scores_after": (1.07, 4.81, 1.34),
}
EX8_EXACT = {
    "scores_before": (1.07, 2.07, 3.07),
    "w2": (3.00, 1.12, 2.08, 1.36, 1.34, 1.22, 1.02),
    "w3": (0.6667, 0.8929, 0.4808, 0.7353, 0.7463, 0.8197, 0.9804),
    "scores_after": (1.07, 4.8074, 1.3390),
}


def _ex8_learner() -> MulticlassWinnow:
    init = [1.0] * (len(EX8) * K)
    init[0:K] = [0.0, 1.0, 2.0]  # bias weights of classes 1, 2, 3: sub-experts (0, c) = c
    return MulticlassWinnow(n_experts=len(EX8) * K, labels=[1, 2, 3], alpha=2.0, init_weights=init)


def _row(w: np.ndarray, c: int) -> np.ndarray:
    """Class c's weights W^c[i] = w[i*K + c], bias first."""
    return w[c::K]


@pytest.mark.parametrize(("expected", "tol"), [(EX8_SLIDE, 5e-3), (EX8_EXACT, 1e-4)])
def test_multiclass_winnow_example_8(expected: dict[str, tuple[float, ...]], tol: float) -> None:
    mw = _ex8_learner()
    x = attributes_as_experts(Attributes.from_dense(EX8), K)
    assert mw.scores(x) == pytest.approx(expected["scores_before"], abs=tol)
    assert mw.predict(x) == 3
    assert mw.learn(x, 2) == (True, True)
    w = mw.weights()
    assert _row(w, 0).tolist() == [0.0] + [1.0] * 6  # class 1 is untouched
    assert _row(w, 1) == pytest.approx(expected["w2"], abs=tol)
    assert _row(w, 2) == pytest.approx(expected["w3"], abs=tol)
    assert mw.scores(x) == pytest.approx(expected["scores_after"], abs=tol)
    assert mw.predict(x) == 2


# -- Committee hand example (Mesterharm 1999, §3.3; exact with fractions) -----------------

HALF = Fraction(1, 2)
X_HAND = [[1, 0], [0, 1], [HALF, HALF]]
X_NEXT = [[0, 1], [1, 0], [1, 0]]


def _votes(w: list[Fraction], x: list[list[Fraction]]) -> list[Fraction]:
    return [sum((wi * xi[j] for wi, xi in zip(w, x, strict=True)), Fraction(0)) for j in range(2)]


def _dense(x: list[list[Fraction]]) -> np.ndarray:
    return np.array([[float(v) for v in row] for row in x])


def test_committee_hand_example() -> None:
    # The expected numbers, exactly, from Committee's rule (Mesterharm 1999, §3.3):
    # w_i *= alpha^(x_i^y - x_i^pred), then normalise; by hand, (1/7, 4/7, 2/7).
    alpha = Fraction(2)
    w0 = [Fraction(1, 3)] * 3
    assert _votes(w0, X_HAND) == [HALF, HALF]
    raw = [wi * alpha ** (xi[1] - xi[0]) for wi, xi in zip(w0, X_HAND, strict=True)]
    assert raw == [Fraction(1, 6), Fraction(2, 3), Fraction(1, 3)]
    w1 = [r / sum(raw) for r in raw]
    assert w1 == [Fraction(1, 7), Fraction(4, 7), Fraction(2, 7)]
    assert _votes(w1, X_HAND) == [Fraction(2, 7), Fraction(5, 7)]
    assert _votes(w1, X_NEXT) == [Fraction(6, 7), Fraction(1, 7)]

    c = Committee(n_experts=3, labels=[1, 2], alpha=2.0)
    x = _dense(X_HAND)
    assert c.scores(x) == pytest.approx([0.5, 0.5], abs=1e-12)
    assert c.predict(x) == 1  # a tie goes to the first class
    assert c.learn(x, 2) == (True, True)
    assert c.weights() == pytest.approx([float(v) for v in w1], abs=1e-12)
    assert c.weights().sum() == pytest.approx(1.0, abs=1e-12)
    assert c.scores(x) == pytest.approx([float(v) for v in _votes(w1, X_HAND)], abs=1e-12)
    nxt = _dense(X_NEXT)
    assert c.scores(nxt) == pytest.approx([float(v) for v in _votes(w1, X_NEXT)], abs=1e-12)
    assert c.predict(nxt) == 1
    assert (c.trials_, c.mistakes_, c.updates_, c.version_) == (1, 1, 1, 1)


# -- Sub-expert Balanced Winnow and Perceptron, first step (Mesterharm & Hsu, §III) ------


def test_subexpert_balanced_winnow_first_step() -> None:
    se = SubExpert({"kind": "balanced-winnow", "alpha": 2}, n_experts=3, labels=[1, 2])
    x = _dense(X_HAND)
    assert se.scores(x).tolist() == [0.0, 0.0]
    assert se.predict(x) == 1
    assert se.learn(x, 2) == (True, True)
    assert se.learner_.w_pos_.tolist() == [0.5, 2.0, 1.0]
    assert se.learner_.w_neg_.tolist() == [2.0, 0.5, 1.0]
    assert se.weights().tolist() == [-1.5, 1.5, 0.0]
    assert se.scores(x).tolist() == [-1.5, 1.5]
    assert se.predict(x) == 2


def test_subexpert_perceptron_first_step() -> None:
    se = SubExpert({"kind": "perceptron"}, n_experts=3, labels=[1, 2])
    x = _dense(X_HAND)
    assert se.scores(x).tolist() == [0.0, 0.0]
    assert se.predict(x) == 1
    assert se.learn(x, 2) == (True, True)
    assert se.weights().tolist() == [-1.0, 1.0, 0.0]
