"""Compiled loop of Committee (Mesterharm 1999, §3.3-3.4)."""

from __future__ import annotations

import numpy as np
from numba import njit

from models.kernels.common import (
    argmax_first,
    linear_max_scores_into,
    slice_difference_into,
)
from models.kernels.weighted_majority import share
from models.kernels.winnow import demoted

__all__ = ["DRIFT", "HIGH", "LOW", "RECOUNT_EVERY", "UNTOUCHED", "learn", "learn_batch"]


# R = sum(r) is kept as a running sum so a trial stays O(active). Its rounding error is
# relative to the largest R since the last exact recount, so R is recounted (O(n), rare)
# every RECOUNT_EVERY updates and whenever it moves by more than DRIFT from the last
# recount; r is rescaled to sum 1 when R leaves [LOW, HIGH].
RECOUNT_EVERY = 1024.0
DRIFT = 1e3
LOW, HIGH = 1e-100, 1e100
#: The most the raw weight of a sub-expert no update has moved may be, after rescales.
UNTOUCHED = 1e200


@njit(cache=True, nogil=True)
def learn(r, sc, la, floor, alpha, expert, cls, value, k, y, wf, wi):  # type: ignore[no-untyped-def]  # pragma: no cover
    """One trial on raw weights ``r``.

    ``sc`` = [R, updates since recount, R at recount, number of changes of every r (rescales
    and shares), the raw weight of a sub-expert no update has moved]; ``wf`` and
    ``wi`` are scratch space of at least k + len(expert) and len(expert) entries.
    A demotion never takes a weight below floor / n of R at the start of the trial
    (0: no floor); after an update, every weight gives the fraction ``alpha`` of itself to
    be shared equally (0: no sharing; one O(n) pass per update).
    """
    s = wf[:k]
    linear_max_scores_into(r, expert, cls, value, s)
    pred = argmax_first(s)
    if pred == y:
        return pred, False
    m = slice_difference_into(expert, cls, value, y, pred, wi, wf[k:])
    if m == 0:
        return pred, False
    zi, zv = wi[:m], wf[k : k + m]
    total = sc[0]
    lim = floor * total / r.shape[0]
    for j in range(m):
        e = zi[j]
        old = r[e]
        r[e] = old * np.exp(la * zv[j])
        if floor > 0.0:
            r[e] = demoted(old, r[e], lim)
        total += r[e] - old
    if alpha > 0.0:
        total, pool = share(r, alpha)
        if sc.shape[0] > 4:  # the raw weight of an untouched sub-expert is shared too
            sc[4] = (1.0 - alpha) * sc[4] + pool
        sc[3] += 1.0  # every weight moved: a new epoch for the averages
    sc[1] += 1.0
    if sc[1] >= RECOUNT_EVERY or not (sc[2] / DRIFT < total < sc[2] * DRIFT):
        total = r.sum()
        if not (LOW < total < HIGH):
            r /= total
            if sc.shape[0] > 4:  # the raw weight of an untouched sub-expert moves too,
                # held finite: past UNTOUCHED it outweighs any total a trial can make
                sc[4] = min(sc[4] / total, UNTOUCHED)
            total = 1.0
            sc[3] += 1.0
        sc[1] = 0.0
        sc[2] = total
    sc[0] = total
    return pred, True


@njit(cache=True, nogil=True)
def learn_batch(  # type: ignore[no-untyped-def]
    r, sc, la, floor, alpha, indptr, expert, cls, value, k, ys, predicted, updates, wf, wi
):  # pragma: no cover
    """:func:`learn` of each row ``t`` (the triples ``indptr[t]:indptr[t + 1]``) with
    class ``ys[t]``, in order, into ``predicted`` (the class) and ``updates``; returns the
    rows applied (all: Committee refuses no update). ``wf`` and ``wi`` as for
    :func:`learn`, for the longest row."""
    for t in range(ys.shape[0]):
        lo, hi = indptr[t], indptr[t + 1]
        pred, upd = learn(
            r, sc, la, floor, alpha, expert[lo:hi], cls[lo:hi], value[lo:hi], k, ys[t], wf, wi
        )
        predicted[t] = pred
        updates[t] = upd
    return ys.shape[0]
