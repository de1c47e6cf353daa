"""Scoring a frozen hypothesis on a whole test set of one-hot sub-expert instances at once.

The test set is a (count, N) matrix of the classes the N sub-experts vote for, and a
linear-max hypothesis's scores are gathered from its weights one sub-expert at a time,
which adds exactly what ``LinearMaxHypothesis.scores`` adds, in the same order, so
predictions (ties included) are identical. :func:`check_predictions` checks that on a
sample against ``predict_class``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from models.core.hypothesis import Hypothesis, LinearMaxHypothesis
from models.inputs.datasets import MajorityProblem
from models.voting.vcombine import VotingHypothesis

__all__ = ["TestVotes", "check_predictions", "hypothesis_scores", "predict_classes"]


class TestVotes:
    """A test set of one-hot sub-expert instances: ``votes[t, e]`` is the class sub-expert e
    votes for (with value 1) in instance t."""

    __test__ = False  # not a pytest class

    def __init__(self, votes: np.ndarray, k: int) -> None:
        self.votes = np.asarray(votes, dtype=np.int64)
        self.k = k
        count, n = self.votes.shape
        # one_hot[e, t, j]: x_e^j of instance t; a sub-expert voting for one class in every
        # instance (a threshold sub-expert) has that class in ``constant`` instead
        self.constant = np.full(n, -1, dtype=np.int64)
        same = (self.votes == self.votes[:1]).all(axis=0) if count else np.ones(n, bool)
        self.constant[same] = self.votes[0, same] if count else 0
        self.one_hot = np.ascontiguousarray(self.votes.T[:, :, None] == np.arange(k))

    @classmethod
    def majority(cls, problem: MajorityProblem, votes: np.ndarray) -> TestVotes:
        """The N = n + k sub-experts of majority instances with random votes ``votes``."""
        thresholds = np.broadcast_to(np.arange(problem.k), (votes.shape[0], problem.k))
        return cls(np.concatenate([votes, thresholds], axis=1), problem.k)

    def __len__(self) -> int:
        return int(self.votes.shape[0])

    def linear_max(self, w: np.ndarray) -> np.ndarray:
        """s[t, j] = sum_e w_e x_e^j, shape (count, k).

        Every class adds its sub-experts' w_e * 1.0 = w_e in the order of e, exactly as
        ``linear_max_scores`` does; the other classes add w_e * 0.0 = +-0.0, which changes no
        value, so the scores are bit for bit the compiled kernel's (weights are finite).
        """
        s = np.zeros((len(self), self.k))
        term = np.empty_like(s)
        for e, c in enumerate(self.constant.tolist()):
            if c >= 0:
                s[:, c] += w[e]
            else:
                np.multiply(self.one_hot[e], w[e], out=term)
                s += term
        return s


def hypothesis_scores(h: Hypothesis, tests: TestVotes) -> np.ndarray:
    """``h.scores`` of every test instance, shape (count, k), computed as ``h`` does."""
    if isinstance(h, LinearMaxHypothesis):
        return tests.linear_max(h.weights) * h.scale
    if isinstance(h, VotingHypothesis):
        total = np.zeros((len(tests), tests.k))
        for voter in h.voters:
            s = hypothesis_scores(voter, tests)
            if h.normalize != "none":
                a = np.abs(s)
                z = (a.sum(axis=1) if h.normalize == "l1" else a.max(axis=1))[:, None]
                s = s / np.where(z > 0, z, 1.0)
            total = total + s
        return total
    raise TypeError(f"no vectorised scoring for {type(h).__name__}")


def predict_classes(h: Hypothesis, tests: TestVotes) -> np.ndarray:
    """``h.predict_class`` of every test instance (first arg-max, as the hypothesis has it)."""
    if isinstance(h, LinearMaxHypothesis):  # predicts from the unscaled scores
        return np.argmax(tests.linear_max(h.weights), axis=1)
    return np.argmax(hypothesis_scores(h, tests), axis=1)


def check_predictions(name: str, h: Hypothesis, fast: np.ndarray, instances: Sequence[Any]) -> None:
    """Raise AssertionError unless ``fast`` starts with ``h.predict_class`` of ``instances``."""
    for i, x in enumerate(instances):
        slow = h.predict_class(x)
        if slow != fast[i]:
            raise AssertionError(
                f"vectorised evaluation of {name} predicts {fast[i]} on test instance {i}, "
                f"predict_class gives {slow}"
            )
