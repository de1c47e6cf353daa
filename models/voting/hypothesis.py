"""The frozen vote of V-Combine and how its slot hypotheses are packed for state export."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from models.core.hypothesis import (
    Hypothesis,
    InstanceCheck,
    Label,
    LinearHypothesis,
    LinearMaxHypothesis,
)
from models.kernels.common import argmax_first
from models.learners.weighted_majority import WeightedMajorityHypothesis

__all__ = [
    "HYPOTHESIS_CLASSES",
    "VotingHypothesis",
    "combine_votes",
    "effective_weights",
    "first_by_plain_sum",
    "hypothesis_fields",
    "nonnegative",
    "rebuild_hypothesis",
]


# -- the frozen vote --------------------------------------------------------------------------


def combine_votes(scores: Sequence[np.ndarray], normalize: str, k: int) -> np.ndarray:
    """V_j = sum over voters of their score vectors, each scaled first unless ``"none"``."""
    total = np.zeros(k)
    for s in scores:
        if normalize != "none":
            z = np.abs(s).sum() if normalize == "l1" else np.abs(s).max()
            if z > 0:
                s = s / z
        total = total + s
    return total


def first_by_plain_sum(scores: np.ndarray, x: Any) -> int:
    """The first arg-max of ``scores``, ties broken by the plain (unweighted) sum of the
    sub-experts' votes for each tied class, then by the smallest class.

    Before any update every score is 0 and this is the plain sum's own arg-max.
    """
    top = scores == scores.max()
    if np.count_nonzero(top) < 2:
        return int(argmax_first(scores))
    plain = np.bincount(x.cls, weights=x.value, minlength=len(scores))[: len(scores)]
    return int(argmax_first(np.where(top, plain, -np.inf)))


def nonnegative(h: Hypothesis) -> Hypothesis:
    """``h`` with its negative sub-expert weights set to 0: each sub-expert can add to the
    classes it votes for, never take from them."""
    if isinstance(h, LinearMaxHypothesis) and (h.weights < 0).any():
        return LinearMaxHypothesis(np.maximum(h.weights, 0.0), h.labels, h.check, h.scale)
    return h  # a Weighted Majority hypothesis's weights are never negative


def effective_weights(h: Hypothesis) -> np.ndarray:
    """A hypothesis's weights on the scale of its scores."""
    return h.normalized() if isinstance(h, LinearMaxHypothesis) else h.weights  # type: ignore[attr-defined]


class VotingHypothesis(Hypothesis):
    """A frozen vote: the sum of its voters' score vectors, first arg-max wins (Mesterharm
    & Hsu, §V.B).

    ``weights`` is the sum of the voters' effective weights (a linear-max voter's scaled
    weights). With raw scores and one class of voter the vote is that class's hypothesis
    with these weights (and a linear vote's threshold is the sum of the thresholds);
    otherwise it only summarises the voters. Scores always sum the voters in order. With
    ``ties="plain-sum"`` tied classes go by :func:`first_by_plain_sum`.
    """

    __slots__ = ("check", "labels", "normalize", "ties", "voters", "weights")

    def __init__(
        self,
        voters: Sequence[Hypothesis],
        normalize: str,
        labels: tuple[Label, ...],
        check: InstanceCheck,
        ties: str = "first",
    ) -> None:
        self.voters = tuple(voters)
        self.normalize = normalize
        self.labels = labels
        self.check = check
        self.ties = ties
        self.weights = np.sum([effective_weights(h) for h in self.voters], axis=0)
        self.weights.flags.writeable = False

    def scores(self, x: Any) -> np.ndarray:
        x = self.check(x)
        return combine_votes([h.scores(x) for h in self.voters], self.normalize, len(self.labels))

    def predict_class(self, x: Any) -> int:
        if self.ties == "first":
            return int(argmax_first(self.scores(x)))
        x = self.check(x)
        return first_by_plain_sum(self.scores(x), x)


# -- packing slot hypotheses ---------------------------------------------------------------


# A slot hypothesis travels as its weights, its class code and one real (a linear-max
# hypothesis's scale or a linear one's threshold) plus a linear one's ``strict`` flag.
HYPOTHESIS_CLASSES: tuple[type, ...] = (
    LinearMaxHypothesis,
    LinearHypothesis,
    WeightedMajorityHypothesis,
)


def hypothesis_fields(h: Hypothesis | None) -> tuple[int, int, float]:
    """(class code, strict, real) of a slot hypothesis; code 0 is an empty slot."""
    if isinstance(h, LinearMaxHypothesis):
        return 1, 0, h.scale
    if isinstance(h, LinearHypothesis):
        return 2, int(h.strict), h.threshold
    return (0, 0, 0.0) if h is None else (3, 0, 0.0)


def rebuild_hypothesis(
    code: int, strict: int, real: float, w: np.ndarray, labels: tuple[Label, ...], check: Any
) -> Hypothesis:
    if code == 1:
        return LinearMaxHypothesis(w, labels, check, real)
    if code == 2:
        return LinearHypothesis(w, real, labels, bool(strict), check)
    return WeightedMajorityHypothesis(w, labels, check)
