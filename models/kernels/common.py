"""Compiled loops shared by several learners (numba, cached on disk).

Every loop runs over the non-zeros of one instance, so a trial costs O(active features).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "argmax_first",
    "dot",
    "linear_max_predict",
    "linear_max_scores",
    "linear_max_scores_into",
    "runner_up",
    "scratch",
    "slice_difference",
    "slice_difference_into",
]


def scratch(k: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Scratch space for a trial over k classes and m non-zeros: (k + m floats, m ints)."""
    return np.empty(k + m), np.empty(max(m, 1), dtype=np.int64)


class Scratch:
    """Scratch space kept by one learner and grown on demand, so a trial allocates nothing.

    It is never part of a learner's state.
    """

    __slots__ = ("f", "i")

    def __init__(self) -> None:
        self.f, self.i = scratch(64, 64)

    def get(self, k: int, m: int) -> tuple[np.ndarray, np.ndarray]:
        if self.f.shape[0] < k + m or self.i.shape[0] < m:
            self.f, self.i = scratch(2 * (k + m), 2 * m)
        return self.f, self.i


@njit(cache=True, nogil=True)
def dot(w: np.ndarray, idx: np.ndarray, val: np.ndarray) -> float:  # pragma: no cover
    s = 0.0
    for j in range(idx.shape[0]):
        s += w[idx[j]] * val[j]
    return s


@njit(cache=True, nogil=True)
def linear_max_scores_into(
    w: np.ndarray, expert: np.ndarray, cls: np.ndarray, value: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover
    """out_j = sum_i w_i x_i^j over the triples of a sub-expert instance."""
    out[:] = 0.0
    for j in range(expert.shape[0]):
        out[cls[j]] += w[expert[j]] * value[j]


@njit(cache=True, nogil=True)
def linear_max_scores(
    w: np.ndarray, expert: np.ndarray, cls: np.ndarray, value: np.ndarray, k: int
) -> np.ndarray:  # pragma: no cover
    s = np.zeros(k)
    linear_max_scores_into(w, expert, cls, value, s)
    return s


@njit(cache=True, nogil=True)
def linear_max_predict(
    w: np.ndarray, expert: np.ndarray, cls: np.ndarray, value: np.ndarray, k: int
) -> int:  # pragma: no cover
    """The first arg-max of the linear-max scores, in one call."""
    return argmax_first(linear_max_scores(w, expert, cls, value, k))


@njit(cache=True, nogil=True)
def linear_max_decide_rows(
    w: np.ndarray,
    expert: np.ndarray,
    cls: np.ndarray,
    value: np.ndarray,
    ptr: np.ndarray,
    k: int,
    scale: float,
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """For each instance ``t``, the triples ``ptr[t]:ptr[t + 1]``: the first arg-max of
    its linear-max scores, and those scores divided by ``scale``."""
    n = ptr.shape[0] - 1
    best = np.empty(n, dtype=np.int64)
    out = np.zeros((n, k))
    for t in range(n):
        a, b = ptr[t], ptr[t + 1]
        linear_max_scores_into(w, expert[a:b], cls[a:b], value[a:b], out[t])
        best[t] = argmax_first(out[t])
        for j in range(k):
            out[t, j] /= scale
    return best, out


@njit(cache=True, nogil=True)
def argmax_first(s: np.ndarray) -> int:  # pragma: no cover
    """Index of the first maximal entry (the global tie rule)."""
    best = 0
    for j in range(1, s.shape[0]):
        if s[j] > s[best]:
            best = j
    return best


@njit(cache=True, nogil=True)
def runner_up(s: np.ndarray, y: int) -> int:  # pragma: no cover
    """The first maximal class other than ``y``."""
    best = -1
    for j in range(s.shape[0]):
        if j != y and (best < 0 or s[j] > s[best]):
            best = j
    return best


@njit(cache=True, nogil=True)
def slice_difference(
    expert: np.ndarray, cls: np.ndarray, value: np.ndarray, a: int, b: int
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """z = x^a - x^b as sparse (indices, values), zeros dropped."""
    zi = np.empty(expert.shape[0], dtype=np.int64)
    zv = np.empty(expert.shape[0], dtype=np.float64)
    m = slice_difference_into(expert, cls, value, a, b, zi, zv)
    return zi[:m], zv[:m]


@njit(cache=True, nogil=True)
def slice_difference_into(
    expert: np.ndarray,
    cls: np.ndarray,
    value: np.ndarray,
    a: int,
    b: int,
    zi: np.ndarray,
    zv: np.ndarray,
) -> int:  # pragma: no cover
    """Write z = x^a - x^b into (zi, zv) as sparse entries, zeros dropped; return their count.

    Triples are sorted by expert, so the entries of one expert are adjacent.
    """
    n = expert.shape[0]
    m = 0
    j = 0
    while j < n:
        e = expert[j]
        acc = 0.0
        while j < n and expert[j] == e:
            if cls[j] == a:
                acc += value[j]
            elif cls[j] == b:
                acc -= value[j]
            j += 1
        if acc != 0.0:
            zi[m] = e
            zv[m] = acc
            m += 1
    return m
