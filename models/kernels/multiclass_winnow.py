"""Compiled loop of multi-class Winnow (Savoy, Advanced Linear Models)."""

from __future__ import annotations

from numba import njit

from models.kernels.common import argmax_first, linear_max_scores, slice_difference

__all__ = ["CEILING", "learn", "learn_batch"]


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


@njit(cache=True, nogil=True)
def learn_batch(w, alpha, indptr, expert, cls, value, k, ys, predicted, updates):  # type: ignore[no-untyped-def]  # pragma: no cover
    """:func:`learn` of each row ``t`` (the triples ``indptr[t]:indptr[t + 1]``) with
    class ``ys[t]``, in order, into ``predicted`` (the class) and ``updates``; returns the
    rows applied, fewer than all when one was refused (its prediction is left in
    ``predicted``, and nothing after it is applied)."""
    for t in range(ys.shape[0]):
        lo, hi = indptr[t], indptr[t + 1]
        pred, status = learn(w, alpha, expert[lo:hi], cls[lo:hi], value[lo:hi], k, ys[t])
        predicted[t] = pred
        if status == 2:
            return t
        updates[t] = status == 1
    return ys.shape[0]
