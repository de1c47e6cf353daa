"""Compiled loops of the Weighted Majority Algorithm (Littlestone & Warmuth 1994)."""

from __future__ import annotations

import numpy as np
from numba import njit

from models.kernels.common import argmax_first
from models.kernels.winnow import demoted

__all__ = ["LOW", "UNTOUCHED", "half_brier", "learn", "learn_batch", "share", "votes"]


LOW = 1e-200
#: The most the weight of an expert never penalised may be, after rescales.
UNTOUCHED = 1e200


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
def share(u, alpha):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Herbster & Warmuth's fixed share: every weight gives the fraction ``alpha`` of itself
    to a pool shared equally by all n, u_i <- (1 - alpha) u_i + alpha sum(u) / n. One O(n)
    pass that also recounts the sum, which it leaves unchanged; returns (that sum, the share
    each weight received)."""
    total = u.sum()
    pool = alpha * total / u.shape[0]
    keep = 1.0 - alpha
    for i in range(u.shape[0]):
        u[i] = keep * u[i] + pool
    return total, pool


@njit(cache=True, nogil=True)
def half_brier(expert, cls, value, y, out):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Half the Brier score of each voting expert's votes, scaled to sum to one, as a
    forecast of class ``y``: sum_c (p_c - [c = y])^2 / 2, in [0, 1], one entry per expert
    group, in the order of :func:`votes` (votes are positive: each group sums above 0)."""
    n = expert.shape[0]
    g = 0
    j = 0
    while j < n:
        e = expert[j]
        start = j
        total = 0.0
        while j < n and expert[j] == e:
            total += value[j]
            j += 1
        b = 1.0  # the true class's (p_y - 1)^2, until it is met
        for i in range(start, j):
            p = value[i] / total
            b += p * p - (2.0 * p if cls[i] == y else 0.0)
        out[g] = min(max(0.5 * b, 0.0), 1.0)
        g += 1


@njit(cache=True, nogil=True)
def learn(u, sc, lb, floor, alpha, brier, every_trial, expert, cls, value, k, y):  # type: ignore[no-untyped-def]  # pragma: no cover
    """One trial. A wrong expert's weight is multiplied by ``lb``, but not below
    floor / n of the total at the start of the trial (0: no floor); with ``brier`` > 0,
    every voting expert's weight is multiplied by ``lb ** (wrong + brier * b)`` instead, b
    half the Brier score of its votes (:func:`half_brier`). After an update that moved a
    weight, every weight gives the fraction ``alpha`` of itself to be shared equally
    (:func:`share`; 0: no sharing)."""
    picks = np.empty((expert.shape[0], 2), dtype=np.int64)
    totals, g = votes(u, expert, cls, value, k, picks)
    pred = argmax_first(totals)
    if not (every_trial or pred != y):
        return pred, False
    scored = np.zeros(g if brier > 0.0 else 0)
    if brier > 0.0:
        half_brier(expert, cls, value, y, scored)
    changed = False
    total = sc[0]
    lim = floor * total / u.shape[0]
    for t in range(g):
        wrong = picks[t, 1] != y
        if brier > 0.0:
            loss = (1.0 if wrong else 0.0) + brier * scored[t]
            if loss == 0.0:
                continue
            factor = lb**loss
        elif wrong:
            factor = lb
        else:
            continue
        e = picks[t, 0]
        old = u[e]
        u[e] = demoted(old, old * factor, lim) if floor > 0.0 else old * factor
        total += u[e] - old
        changed = changed or floor == 0.0 or u[e] != old
    if changed and alpha > 0.0:
        total, pool = share(u, alpha)
        if sc.shape[0] > 2:  # the weight of an expert never penalised is shared too
            sc[2] = (1.0 - alpha) * sc[2] + pool
    # The running sum's rounding error is relative to its value at the last exact count;
    # recount whenever it has halved since, and rescale before the weights underflow.
    if changed and total < 0.5 * sc[1]:
        total = u.sum()
        if 0.0 < total < LOW:
            u /= total
            if sc.shape[0] > 2:  # the weight of an expert never penalised moves too,
                # held finite: past UNTOUCHED it outweighs any total a trial can make
                sc[2] = min(sc[2] / total, UNTOUCHED)
            total = 1.0
        sc[1] = total
    sc[0] = total
    return pred, changed


@njit(cache=True, nogil=True)
def learn_batch(  # type: ignore[no-untyped-def]
    u,
    sc,
    lb,
    floor,
    alpha,
    brier,
    every_trial,
    indptr,
    expert,
    cls,
    value,
    k,
    ys,
    predicted,
    updates,
):  # pragma: no cover
    """:func:`learn` of each row ``t`` (the triples ``indptr[t]:indptr[t + 1]``) with
    class ``ys[t]``, in order, into ``predicted`` (the class) and ``updates``; returns the
    rows applied (all: Weighted Majority refuses no update)."""
    for t in range(ys.shape[0]):
        lo, hi = indptr[t], indptr[t + 1]
        pred, changed = learn(
            u, sc, lb, floor, alpha, brier, every_trial,
            expert[lo:hi], cls[lo:hi], value[lo:hi], k, ys[t],
        )  # fmt: skip
        predicted[t] = pred
        updates[t] = changed
    return ys.shape[0]
