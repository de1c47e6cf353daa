"""How V-Combine's stored hypotheses take new inputs and labels.

A slot holds a snapshot of one member's hypothesis. When the input grows, the member
grows as its kind does (a new coordinate takes the value an untouched one has now), and
a held snapshot grows as the member would have shown it then: its new coordinates take
the value an untouched coordinate had in it when it was taken. That value cannot be read
off the snapshot later (which of its coordinates were untouched is not known, and the
value moves with rescales, and with every trial of an average), so the slot records it
when it takes the snapshot (:func:`untouched_weight`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from models.core.hypothesis import Hypothesis, Label, LinearHypothesis, LinearMaxHypothesis
from models.core.learner import Learner
from models.kernels import averaging as avg_kernel
from models.learners.committee import Committee
from models.learners.weighted_majority import WeightedMajority, WeightedMajorityHypothesis
from models.wrappers.averaging import Averaging
from models.wrappers.recycling import Recycling

__all__ = ["grown_hypothesis", "normalised_by_sum", "untouched_weight"]


def untouched_weight(learner: Learner) -> float:
    """The weight a coordinate no trial has moved has now in ``learner.snapshot()``: what
    a new coordinate of the learner grown now would show there.

    >>> from models.registry import build
    >>> bw = build({"kind": "balanced-winnow", "init_pos": 2.0}, labels=(1, -1), size=3)
    >>> untouched_weight(bw)
    1.0
    """
    if isinstance(learner, Recycling):  # its snapshot is its learner's
        return untouched_weight(learner.learner_)
    if isinstance(learner, Averaging):
        return _averaged_untouched(learner)
    if isinstance(learner, WeightedMajority):
        return float(learner.scalars_[2])
    try:
        rows = learner.silent_rows()
        coef = learner.linear_coef()
    except TypeError:  # no linear view: a kind that cannot grow (its _can_grow says so)
        return 0.0
    return float(sum(float(c) * float(b) for c, b in zip(coef, rows, strict=True)))


def _averaged_untouched(learner: Averaging) -> float:
    """An averaged learner's untouched coordinate: its running sums (the ghost column that
    a new coordinate takes) averaged as every coordinate's are."""
    if learner.totals_.shape[0] == 4:  # a state kept before the untouched column was
        rows = learner.learner_.silent_rows()
        return float(learner.linear_coef() @ rows) * learner.learner_.linear_scale()
    mark, acc, seen = learner._ghost()
    p, t = learner.totals_[:2]
    scale = learner.learner_.linear_scale() if t == 0 else 1.0
    out = np.empty(1)
    avg_kernel.averaged(
        np.ascontiguousarray(acc[:, None]), np.ascontiguousarray(seen[:, None]),
        mark.copy(), p, t, scale, learner._coef, np.zeros(1, dtype=np.int64), out,
    )  # fmt: skip
    return float(out[0])


def normalised_by_sum(learner: Learner) -> bool:
    """Whether ``learner``'s snapshots scale their weights by 1 / their sum (Committee's,
    directly or through recycling): a grown one is scaled by its new sum."""
    while isinstance(learner, Recycling):
        learner = learner.learner_
    return isinstance(learner, Committee)


def grown_hypothesis(
    h: Hypothesis,
    untouched: float,
    size: int,
    at: np.ndarray,
    labels: tuple[Label, ...],
    check: Any,
    *,
    threshold: float | None,
    by_sum: bool,
) -> Hypothesis:
    """Slot hypothesis ``h`` over ``size`` coordinates, its coordinate i at ``at[i]`` and
    the others at ``untouched``, over ``labels`` (the old ones first).

    ``threshold``: the grown member's threshold, which a linear hypothesis takes (it is
    fixed by the parameters, and Winnow's default moves with n). ``by_sum``: the weights
    are scaled by 1 / their sum (see :func:`normalised_by_sum`).
    """
    old = np.asarray(h.weights)  # type: ignore[attr-defined]
    w = np.full(size, untouched, dtype=np.float64)
    w[at] = old
    if isinstance(h, LinearMaxHypothesis):
        scale = 1.0 / float(w.sum()) if by_sum else h.scale
        return LinearMaxHypothesis(w, labels, check, scale)
    if isinstance(h, LinearHypothesis):
        t = h.threshold if threshold is None else threshold
        return LinearHypothesis(w, t, labels, h.strict, check)
    assert isinstance(h, WeightedMajorityHypothesis)
    return WeightedMajorityHypothesis(w, labels, check)
