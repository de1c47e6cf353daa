"""Synthetic streams: Mesterharm & Hsu's majority problem (§VII) and a sparse binary stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from models.core.instance import AttributeBatch, Experts
from models.core.params import Constraint, Options, validate_params

__all__ = ["MajorityProblem", "majority_target", "sparse_disjunction_stream"]


@dataclass(frozen=True)
class MajorityProblem:
    """The majority learning problem of Mesterharm & Hsu, §VII.

    Each of ``n`` sub-experts votes one-hot for a class drawn uniformly from k; k threshold
    sub-experts follow (sub-expert n + c always votes for c), so an instance has
    N = n + k sub-experts. The clean label is the class most voted for by the first ``r``
    sub-experts; with probability ``noise`` it is replaced by one of the other k - 1 classes
    drawn uniformly.

    Their §VII says both "we place an order on the relevant sub-experts to handle ties" and
    "the instance is labeled according to the smallest class value involved in the tie".
    ``ties="smallest"`` follows the second sentence and their target weights; ``"order"``
    follows the first: among the tied classes, the one voted for by the first relevant
    sub-expert (in index order) that votes for any of them. docs/table1.rst gives the
    evidence for N = n + k and for the smallest-class rule.

    Examples
    --------
    >>> xs, ys, clean = MajorityProblem().sample(3, np.random.default_rng(0))
    >>> len(xs), xs[0].size, ys.shape
    (3, 25, (3,))
    """

    n: int = 20
    r: int = 10
    k: int = 5
    noise: float = 0.0
    ties: str = "smallest"

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "ties": Options(("smallest", "order")),
    }

    def __post_init__(self) -> None:
        validate_params(self._parameter_constraints, vars(self))

    @property
    def n_experts(self) -> int:
        return self.n + self.k

    def sample(
        self, count: int, rng: np.random.Generator
    ) -> tuple[list[Experts], np.ndarray, np.ndarray]:
        """``count`` instances, their (noisy) labels and their clean labels."""
        votes = self.sample_votes(count, rng)
        clean = self.clean_labels(votes)
        return [self.instance(v) for v in votes], self.add_noise(clean, rng), clean

    def sample_votes(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """The random sub-experts' classes, shape (count, n)."""
        return rng.integers(0, self.k, size=(count, self.n))

    def clean_labels(self, votes: np.ndarray) -> np.ndarray:
        counts = np.zeros((votes.shape[0], self.k), dtype=np.int64)
        for c in range(self.k):
            counts[:, c] = (votes[:, : self.r] == c).sum(axis=1)
        if self.ties == "smallest":
            return counts.argmax(axis=1)  # first maximum: the smallest class wins ties
        tied = counts == counts.max(axis=1, keepdims=True)
        votes_tied = np.take_along_axis(tied, votes[:, : self.r], axis=1)
        first = votes_tied.argmax(axis=1)  # the first relevant sub-expert voting a tied class
        return votes[np.arange(votes.shape[0]), first]

    def add_noise(self, clean: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        flip = rng.random(clean.shape[0]) < self.noise
        shift = rng.integers(1, self.k, size=clean.shape[0])
        return np.where(flip, (clean + shift) % self.k, clean)

    def instance(self, votes: np.ndarray) -> Experts:
        n, k = self.n, self.k
        expert = np.arange(n + k, dtype=np.int64)
        cls = np.concatenate([votes.astype(np.int64), np.arange(k, dtype=np.int64)])
        return Experts._trusted(expert, cls, np.ones(n + k), size=n + k)


def majority_target(problem: MajorityProblem) -> tuple[np.ndarray, float]:
    """The normalised target weights of Mesterharm & Hsu, §VII, over the n + k sub-experts,
    and the margin delta."""
    a = 1.0 / (problem.r + (problem.k - 1) / 2)
    u = np.zeros(problem.n_experts)
    u[: problem.r] = a
    u[problem.n :] = (problem.k - 1 - np.arange(problem.k)) * a / problem.k
    return u, a / problem.k


def sparse_disjunction_stream(
    count: int,
    n_features: int = 10_000,
    n_active: int = 20,
    n_relevant: int = 350,
    noise: float = 0.05,
    seed: int = 0,
) -> tuple[AttributeBatch, np.ndarray]:
    """A sparse binary stream: label +1 iff an active feature is one of ``n_relevant``.

    Every instance has ``n_active`` distinct features set to 1, the last of which is a
    constant attribute (index n_features - 1) so threshold-0 learners can learn a bias.
    Labels are +1 / -1, each flipped with probability ``noise``.
    """
    rng = np.random.default_rng(seed)
    m = n_active - 1
    idx = np.empty((count, n_active), dtype=np.int64)
    for t in range(count):
        idx[t, :m] = rng.choice(n_features - 1, size=m, replace=False)
    idx[:, m] = n_features - 1
    relevant = np.zeros(n_features, dtype=bool)
    relevant[rng.choice(n_features - 1, size=n_relevant, replace=False)] = True
    y = np.where(relevant[idx].any(axis=1), 1, -1)
    y = np.where(rng.random(count) < noise, -y, y)
    indptr = np.arange(0, count * n_active + 1, n_active, dtype=np.int64)
    batch = AttributeBatch(indptr, idx.reshape(-1), np.ones(count * n_active))
    return batch, y
