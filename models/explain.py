"""Explanations: each input's contribution to each label's score, exact where it exists.

A learner whose scores are sums over the instance's inputs is explained exactly: for every
label c, ``constant[c] + contributions[c].sum()`` is the score the learner gives, up to
float rounding (the learner may sum in another order). Explaining reads the learner and
changes nothing. Per kind:

=====================================  ==================================================
kind                                   contribution of input i to label c's score
=====================================  ==================================================
winnow, balanced-winnow,               w_i x_i to the first label, -w_i x_i to the second;
perceptron, alma                       the constant -theta and +theta (winnow: the
                                       midpoint of its band; alma: the primal w)
committee                              w_i x_i^c, w the weights over their running sum
multiclass-winnow, subexpert           w_i x_i^c (subexpert: the binary learner's w)
weighted-majority, fusion              w_i to the label sub-expert i votes for (its top)
averaging                              as its learner, with the averaged weights that
                                       predict
recycling                              as its learner
bagging (``vote: "scores"``)           the sum of its copies' contributions
bagging (majority), boosting, ecoc,    none: refused (:class:`NotExplainable`); their
v-combine, vr-combine                  scores count or weigh predictions, or decode
                                       through a hinge, not sums over inputs
=====================================  ==================================================

:func:`describe` names the contributions by the model's input
(:meth:`~models.inputs.space.InputSpace.describe_experts`), keeps the largest few of each
label and sums the others into ``rest``, so the listed parts still add up to the score.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.core.forms import BinaryLearner
from models.core.instance import Attributes, Experts
from models.core.learner import Learner
from models.ensembles.bagging import OnlineBagging
from models.inputs.space import InputSpace
from models.learners.committee import Committee
from models.learners.multiclass_winnow import MulticlassWinnow
from models.learners.weighted_majority import WeightedMajority
from models.wrappers.averaging import Averaging
from models.wrappers.recycling import Recycling
from models.wrappers.subexpert import SubExpert

__all__ = [
    "TOP_DEFAULT",
    "TOP_MOST",
    "Explanation",
    "NotExplainable",
    "describe",
    "explain",
    "explainable",
]

#: The contributions :func:`describe` lists per label unless asked otherwise, and at most.
TOP_DEFAULT = 10
TOP_MOST = 1000

#: Input names (as ``describe_experts`` gives them, the label apart) that are the model's
#: constant: the constant attribute and the threshold sub-experts.
_CONSTANT_NAMES = frozenset({"constant", "threshold"})


class NotExplainable(ValueError):
    """A learner whose scores have no exact decomposition into its inputs' parts."""

    def __init__(self, kind: str, why: str) -> None:
        super().__init__(f"{kind} predictions cannot be explained: {why}")
        self.kind = kind


@dataclass(frozen=True)
class Explanation:
    """Contributions of an instance's active inputs to each label's score.

    ``index`` holds the learner coordinates the instance has active (attribute indices,
    or sub-expert indices), ascending; ``contributions[c, j]`` is coordinate
    ``index[j]``'s part of label c's score and ``constant[c]`` the part of no input.
    """

    kind: str
    index: np.ndarray
    contributions: np.ndarray
    constant: np.ndarray

    def totals(self) -> np.ndarray:
        """The scores the parts add up to: ``constant + contributions.sum(axis=1)``."""
        return self.constant + self.contributions.sum(axis=1)

    def __add__(self, other: Explanation) -> Explanation:
        """The parts of the sum of two learners' scores over the same instance."""
        return Explanation(
            self.kind,
            self.index,
            self.contributions + other.contributions,
            self.constant + other.constant,
        )


# -- the parts of each kind ------------------------------------------------------------


def _active(x: Attributes | Experts) -> np.ndarray:
    return x.indices if isinstance(x, Attributes) else np.unique(x.expert)


def _binary(learner: Learner, x: Any, w: np.ndarray, threshold: float) -> Explanation:
    """Scores (m, -m) with m = w.x - threshold: ``w`` the weights at ``x.indices``."""
    part = w * x.values
    return Explanation(
        learner.kind,
        x.indices,
        np.stack([part, -part]),
        np.array([0.0 - threshold, threshold]),  # no -0.0 at threshold 0
    )


def _linear_max(learner: Learner, x: Experts, w: np.ndarray) -> Explanation:
    """Scores s_c = sum_i w_i x_i^c: ``w`` the weights at ``x.expert``."""
    index, at = np.unique(x.expert, return_inverse=True)
    parts = np.zeros((learner.n_classes, index.size))
    parts[x.cls, at] = w * x.value  # one triple per (class, sub-expert)
    return Explanation(learner.kind, index, parts, np.zeros(learner.n_classes))


def _of_binary(learner: Learner, x: Any) -> Explanation:
    assert isinstance(learner, BinaryLearner)
    w = learner.weights_at(x.indices)
    return _binary(learner, x, w, learner.effective_threshold)


def _of_committee(learner: Learner, x: Any) -> Explanation:
    assert isinstance(learner, Committee)
    # its scores divide the raw weights by their running sum
    return _linear_max(learner, x, learner.r_[x.expert] / learner.scalars_[0])


def _of_multiclass_winnow(learner: Learner, x: Any) -> Explanation:
    assert isinstance(learner, MulticlassWinnow)
    return _linear_max(learner, x, learner.w_[x.expert])


def _of_subexpert(learner: Learner, x: Any) -> Explanation:
    assert isinstance(learner, SubExpert)
    return _linear_max(learner, x, learner.learner_.weights_at(x.expert))


def _of_weighted_majority(learner: Learner, x: Any) -> Explanation:
    """Each voting sub-expert gives its weight to its own top class (the first of its
    largest votes), as the learner counts it."""
    assert isinstance(learner, WeightedMajority)
    index, first = np.unique(x.expert, return_index=True)
    parts = np.zeros((learner.n_classes, index.size))
    ends = np.append(first[1:], x.expert.size) if index.size else first
    for j, (a, b) in enumerate(zip(first.tolist(), ends.tolist(), strict=True)):
        top = a + int(np.argmax(x.value[a:b]))  # the first largest, as the kernel picks
        parts[x.cls[top], j] = learner.u_[index[j]]
    return Explanation(learner.kind, index, parts, np.zeros(learner.n_classes))


def _of_averaging(learner: Learner, x: Any) -> Explanation:
    """The averaged weights, the ones that predict (B's own before the first trial)."""
    assert isinstance(learner, Averaging)
    coef = learner.learner_.linear_coef()
    if isinstance(x, Attributes):
        w = coef @ learner.averaged_rows(x.indices)
        return _binary(learner, x, w, learner._threshold)
    return _linear_max(learner, x, coef @ learner.averaged_rows(x.expert))


def _of_recycling(learner: Learner, x: Any) -> Explanation:
    assert isinstance(learner, Recycling)
    inner = _explained(learner.learner_, x)
    return Explanation(learner.kind, inner.index, inner.contributions, inner.constant)


def _of_bagging(learner: Learner, x: Any) -> Explanation:
    assert isinstance(learner, OnlineBagging)
    parts = [_explained(m, x) for m in learner.models_]
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return Explanation(learner.kind, total.index, total.contributions, total.constant)


_EXPLAIN: dict[str, Callable[[Learner, Any], Explanation]] = {
    "winnow": _of_binary,
    "balanced-winnow": _of_binary,
    "perceptron": _of_binary,
    "alma": _of_binary,
    "committee": _of_committee,
    "multiclass-winnow": _of_multiclass_winnow,
    "subexpert": _of_subexpert,
    "weighted-majority": _of_weighted_majority,
    "fusion": _of_weighted_majority,
    "averaging": _of_averaging,
    "recycling": _of_recycling,
    "bagging": _of_bagging,
}

_VOTE = "its vote counts the predictions of earlier hypotheses, not sums over the inputs"
#: Why the other kinds are refused.
_REFUSED = {
    "bagging": 'its majority vote counts the copies\' predictions (vote "scores" sums their '
    "scores, which can be explained)",
    "boosting": "its scores weigh the models' predictions, not sums over the inputs",
    "ecoc": "it decodes the columns' predictions (or a hinge of their margins), not a sum "
    "over the inputs",
    "v-combine": _VOTE,
    "vr-combine": _VOTE,
}


def explainable(learner: Learner) -> None:
    """Raise :class:`NotExplainable` unless :func:`explain` can explain ``learner``."""
    kind = learner.kind
    if kind not in _EXPLAIN or (isinstance(learner, OnlineBagging) and learner.vote != "scores"):
        why = _REFUSED.get(kind, "its scores have no known decomposition into its inputs' parts")
        raise NotExplainable(kind, why)
    if isinstance(learner, Recycling):
        _inner_explainable(learner, learner.learner_)
    elif isinstance(learner, OnlineBagging):
        _inner_explainable(learner, learner.models_[0])


def _inner_explainable(outer: Learner, inner: Learner) -> None:
    try:
        explainable(inner)
    except NotExplainable as e:
        raise NotExplainable(f"{outer.kind} of {e.kind}", str(e).split(": ", 1)[1]) from None


def _explained(learner: Learner, x: Any) -> Explanation:
    return _EXPLAIN[learner.kind](learner, x)


def explain(learner: Learner, x: Any) -> Explanation:
    """The contributions of ``x``'s active inputs to each of ``learner``'s scores.

    ``x`` is checked as :meth:`~models.core.learner.Learner.scores` checks it. Raises
    :class:`NotExplainable` for a kind without an exact decomposition (see the module
    notes). Reads the learner only.

    Examples
    --------
    >>> from models.learners.perceptron import Perceptron
    >>> p = Perceptron(n_features=3)
    >>> _ = p.learn([1.0, 0.0, 1.0], -1)
    >>> e = explain(p, [0.5, 0.0, 2.0])
    >>> e.index.tolist(), e.contributions.tolist(), e.constant.tolist()
    ([0, 2], [[-0.5, -2.0], [0.5, 2.0]], [0.0, 0.0])
    >>> e.totals().tolist() == p.scores([0.5, 0.0, 2.0]).tolist()
    True
    """
    explainable(learner)
    return _explained(learner, learner.coerce(x))


# -- named, for an answer -----------------------------------------------------------------

# the names of each space's coordinates, per form, for the spaces explained lately: a
# space never changes (a change makes a new one), so its names are worked out once
_NAMES_KEPT = 64
_NAMES_MOST = 1 << 20  # coordinates of a space whose names are kept; larger ones named anew
_names: dict[tuple[int, str], tuple[weakref.ref[InputSpace], list[str]]] = {}


def _names_of(space: InputSpace, form: str) -> list[str]:
    key = (id(space), form)
    kept = _names.get(key)
    if kept is not None and kept[0]() is space:
        return kept[1]
    names = space.describe_experts(form)
    if len(names) <= _NAMES_MOST:
        if len(_names) >= _NAMES_KEPT:
            _names.pop(next(iter(_names)))
        _names[key] = (weakref.ref(space), names)
    return names


def describe(
    e: Explanation, space: InputSpace, form: str, top: int = TOP_DEFAULT
) -> dict[str, Any]:
    """``e`` as an answer names it, by the inputs of ``space`` (the learner's in ``form``).

    Per label (by its name as a string): ``constant``, the part of no input (a threshold,
    the constant attribute, the threshold sub-experts); ``contributions``, the ``top``
    inputs of largest part (by absolute value, the earlier coordinate first on ties), each
    ``{"input": name, "value": part}``; and ``rest``, the sum of the other inputs' parts.
    An input is named as ``describe_experts`` names its coordinate, without the
    ``@label:...`` of a sub-expert that votes for that label only (so an expert's split
    pieces add to the expert); inputs whose part is 0 are left out.
    """
    names = _names_of(space, form)
    index = e.index.tolist()
    out: dict[str, Any] = {}
    for c, label in enumerate(space.labels):
        row = e.contributions[c]
        suffix = f"@label:{label}"
        constant = float(e.constant[c])
        parts: dict[str, float] = {}
        for j in np.flatnonzero(row).tolist():
            name = names[index[j]].removesuffix(suffix)
            value = float(row[j])
            if name in _CONSTANT_NAMES:
                constant += value
            else:
                parts[name] = parts.get(name, 0.0) + value
        ranked = sorted(parts.items(), key=lambda kv: -abs(kv[1]))  # stable: ties keep order
        shown, rest = ranked[:top], ranked[top:]
        out[str(label)] = {
            "constant": constant,
            "contributions": [{"input": n, "value": v} for n, v in shown],
            "rest": float(sum(v for _, v in rest)),
        }
    return {"kind": e.kind, "labels": out}
