"""Compiled loop of multi-class Winnow (Savoy, Advanced Linear Models)."""

from __future__ import annotations

from numba import njit

from models.kernels.common import argmax_first, linear_max_scores, slice_difference

__all__ = ["CEILING", "learn"]


#: No weight reaches this: an update that would push one to it is refused, whole. A score
#: sums at most 2**26 weights times votes within [0, 1], and A-B's running sum of a weight
#: over 2**64 trials stays below 2**64 * CEILING: both finite.
CEILING = 1e280


@njit(cache=True, nogil=True)
def learn(w, alpha, expert, cls, value, k, y):  # type: ignore[no-untyped-def]  # pragma: no cover
    s = linear_max_scores(w, expert, cls, value, k)
    pred = argmax_first(s)
    if pred == y:
        return pred, 0
    zi, zv = slice_difference(expert, cls, value, y, pred)
    for j in range(zi.shape[0]):  # refuse, whole, an update that would overflow
        f = 1.0 + alpha * abs(zv[j])
        v = w[zi[j]] * f if zv[j] > 0 else w[zi[j]] / f
        if not v < CEILING:
            return pred, 2
    for j in range(zi.shape[0]):
        f = 1.0 + alpha * abs(zv[j])
        if zv[j] > 0:
            w[zi[j]] *= f
        else:
            w[zi[j]] /= f
    return pred, 1 if zi.shape[0] > 0 else 0
