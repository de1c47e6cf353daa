"""Compiled loops of the Weighted Majority Algorithm (Littlestone & Warmuth 1994)."""

from __future__ import annotations

import numpy as np
from numba import njit

from models.kernels.common import argmax_first

__all__ = ["LOW", "learn", "votes"]


LOW = 1e-200


@njit(cache=True, nogil=True)
def votes(u, expert, cls, value, k, picks):  # type: ignore[no-untyped-def]  # pragma: no cover
    """W_j = total weight of the experts whose own prediction is j; ``picks`` gets each
    voting expert's prediction (its first largest vote), one entry per expert group."""
    totals = np.zeros(k)
    n = expert.shape[0]
    g = 0
    j = 0
    while j < n:
        e = expert[j]
        best = j
        while j < n and expert[j] == e:
            if value[j] > value[best]:
                best = j
            j += 1
        picks[g, 0] = e
        picks[g, 1] = cls[best]
        totals[cls[best]] += u[e]
        g += 1
    return totals, g


@njit(cache=True, nogil=True)
def learn(u, sc, lb, every_trial, expert, cls, value, k, y):  # type: ignore[no-untyped-def]  # pragma: no cover
    picks = np.empty((expert.shape[0], 2), dtype=np.int64)
    totals, g = votes(u, expert, cls, value, k, picks)
    pred = argmax_first(totals)
    if not (every_trial or pred != y):
        return pred, False
    changed = False
    total = sc[0]
    for t in range(g):
        if picks[t, 1] != y:
            e = picks[t, 0]
            old = u[e]
            u[e] = old * lb
            total += u[e] - old
            changed = True
    # The running sum's rounding error is relative to its value at the last exact count;
    # recount whenever it has halved since, and rescale before the weights underflow.
    if changed and total < 0.5 * sc[1]:
        total = u.sum()
        if 0.0 < total < LOW:
            u /= total
            if sc.shape[0] > 2:  # the weight of an expert never penalised moves too
                sc[2] /= total
            total = 1.0
        sc[1] = total
    sc[0] = total
    return pred, changed
