"""Compiled loops of instance recycling R-B (Mesterharm & Hsu, §VI), numba.

:func:`learn_and_recycle` runs one real trial of a basic learner (any family of
:mod:`models.kernels.dispatch`) and then the recycling passes over the store until one changes
nothing, without returning to Python; :class:`models.wrappers.recycling.Recycling` and the
compiled V-Combine (:mod:`models.kernels.voting`) both call it. The store is a ring of s
items, each a row of padded (experts or indices, classes, values) with its length, label
and update count.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from models.kernels.common import argmax_first, runner_up
from models.kernels.dispatch import learn_any, weight_scale
from models.kernels.families import (
    ALMA,
    ALMA_ALPHA,
    ALMA_B,
    ALMA_P,
    ALMA_UPDATES,
    BALANCED,
    COMMITTEE,
    SUBEXPERT_RUNNER_UP,
    base_family,
)

__all__ = ["learn_and_recycle", "push"]


@njit(cache=True, nogil=True)
def push(a, b, v, c, count, ia, ib, iv, ilen, iy, icnt, ring):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Store an item, dropping the oldest when full; ``ring`` = [oldest slot, size]."""
    s = ilen.shape[0]
    if ring[1] < s:
        slot = (ring[0] + ring[1]) % s
        ring[1] += 1
    else:
        slot = ring[0]
        ring[0] = (ring[0] + 1) % s
    m = a.shape[0]
    ilen[slot] = m
    ia[slot, :m] = a
    ib[slot, :m] = b
    iv[slot, :m] = v
    iy[slot] = c
    icnt[slot] = count


@njit(cache=True, nogil=True, inline="always")
def _item_scores(base, W, scale, ia, ib, iv, j, m, out):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Scores of stored item j for a family with weight form ``base`` (see
    ``effective_weight``), read in place. Each class sums its terms in item order, as the
    family's own trial does, so both predict alike; one loop per form keeps it fast."""
    for c in range(out.shape[0]):
        out[c] = 0.0
    if base == BALANCED:
        for t in range(m):
            i = ia[j, t]
            out[ib[j, t]] += (W[i, 0] - W[i, 1]) * iv[j, t]
    elif base == ALMA:
        for t in range(m):
            out[ib[j, t]] += (scale * W[1, ia[j, t]]) * iv[j, t]
    else:
        for t in range(m):
            out[ib[j, t]] += W[0, ia[j, t]] * iv[j, t]


@njit(cache=True, nogil=True, inline="always")
def _item_is_settled(ia, ib, iv, j, m, yj, s, mass, P, limit, roots):  # type: ignore[no-untyped-def]  # pragma: no cover
    """True when a runner-up sub-expert learner certainly makes no update on item j, whose
    scores are ``s``.

    That needs a correct prediction with s_y - s_c above the learner's margin threshold
    (``limit``, 0 for learners other than ALMA, whose ``P[ALMA_P]`` is p) times ||z||_p, where
    c is the runner-up and z = x^y - x^c. By Minkowski's inequality ||z||_p <= ||x^y||_p +
    ||x^c||_p, so the test is cheap and conservative (a small slack covers rounding);
    undecided items take the full trial. ``roots[i]`` holds i ** (1/p) for the whole
    masses of one-hot votes.
    """
    if argmax_first(s) != yj:
        return False
    c = runner_up(s, yj)
    gap = s[yj] - s[c] - 1e-9 * (abs(s[yj]) + abs(s[c]))
    if limit == 0.0:
        return gap > 0.0
    for e in range(mass.shape[0]):
        mass[e] = 0.0
    for t in range(m):
        v = iv[j, t]
        mass[ib[j, t]] += 1.0 if abs(v) == 1.0 else abs(v) ** P[ALMA_P]
    return gap > limit * (_root(mass[yj], P[ALMA_P], roots) + _root(mass[c], P[ALMA_P], roots))


@njit(cache=True, nogil=True, inline="always")
def _root(mass, p, roots):  # type: ignore[no-untyped-def]  # pragma: no cover
    """mass ** (1/p), looked up when mass is a whole number in the table."""
    if mass < roots.shape[0] and mass == np.floor(mass):
        return roots[int(mass)]
    return mass ** (1.0 / p)


@njit(cache=True, nogil=True)
def learn_and_recycle(  # type: ignore[no-untyped-def]
    fam, W, S, P, k, a, b, v, c, ia, ib, iv, ilen, iy, icnt, ring, internal, u, wf, wi
):  # fmt: skip  # pragma: no cover
    """One real trial then, after an update, recycling passes until one changes nothing.

    Labels are class indices; binary families (below COMMITTEE) see them as +1/-1.
    ``internal`` counts internal trials, mistakes and updates. Returns (prediction, status);
    status 2 (an update refused, real or internal) leaves the trial half done: the caller
    restores the state it saved before.
    An item is not tried again while the learner has not updated since it last left the
    learner unchanged: the same state would give the same outcome, which is counted again.
    """
    binary = fam < COMMITTEE
    y = 1 - 2 * c if binary else c
    pred, status = learn_any(fam, W, S, P, a, b, v, k, y, wf, wi)
    if status == 2:
        return pred, status
    push(a, b, v, c, 1 if status == 1 else 0, ia, ib, iv, ilen, iy, icnt, ring)
    if status == 0:
        return pred, status
    s = ilen.shape[0]
    # Families that update only on mistakes are first asked for a prediction in place, and
    # only a wrong one goes through the full trial.
    on_mistakes = COMMITTEE <= fam < SUBEXPERT_RUNNER_UP
    runner_up_family = fam >= SUBEXPERT_RUNNER_UP
    base = base_family(fam)
    alma = runner_up_family and base == ALMA
    scores, mass = np.empty(k), np.empty(k)  # (no slices in the loop: a view costs)
    roots = np.empty(ia.shape[1] + 1 if alma else 0)
    for i in range(roots.shape[0]):
        roots[i] = float(i) ** (1.0 / P[ALMA_P])
    updates = 0  # internal updates so far in this trial
    unchanged = np.full(s, -1)  # item j last left the learner unchanged after that many
    wrong = np.zeros(s, dtype=np.bool_)  # ... and whether that was an internal mistake
    scaled = -1  # the number of updates when scale and limit were last computed
    scale = limit = 0.0
    changed = True
    while changed:
        changed = False
        for r in range(ring[1]):  # oldest to newest
            j = (ring[0] + r) % s
            if icnt[j] >= u:
                continue
            internal[0] += 1
            if unchanged[j] == updates:
                internal[1] += wrong[j]
                continue
            yj = 1 - 2 * iy[j] if binary else iy[j]
            m = ilen[j]
            unchanged[j], wrong[j] = updates, False
            if scaled != updates:
                scale, scaled = weight_scale(base, S, P), updates
                if alma:  # update iff margin / ||z||_p <= (1 - alpha) B sqrt(p-1) / sqrt(k)
                    limit = (1.0 - P[ALMA_ALPHA]) * P[ALMA_B] * np.sqrt(P[ALMA_P] - 1.0)
                    limit /= np.sqrt(S[ALMA_UPDATES])
            if on_mistakes or runner_up_family:
                _item_scores(base, W, scale, ia, ib, iv, j, m, scores)
                if on_mistakes and argmax_first(scores) == yj:
                    continue
                if runner_up_family and _item_is_settled(
                    ia, ib, iv, j, m, yj, scores, mass, P, limit, roots
                ):
                    continue
            p2, st2 = learn_any(fam, W, S, P, ia[j, :m], ib[j, :m], iv[j, :m], k, yj, wf, wi)
            wrong[j] = p2 != yj
            internal[1] += wrong[j]
            if st2 == 1:
                icnt[j] += 1
                internal[2] += 1
                updates += 1
                unchanged[j] = -1
                changed = True
            elif st2 == 2:  # a refused internal update refuses the whole trial
                return pred, st2
    return pred, status
