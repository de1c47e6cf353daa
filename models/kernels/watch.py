"""Compiled steps of the watches that follow a model's trials (``app.service.drift_watch``
and ``app.service.bound_watch``): each sub-expert's top vote, one trial's 0/1 mistakes fed
to the Page-Hinkley detectors of many streams at once, and the bound watch's counts, one
trial or a run of them; the named slots of their arrays.

The streams of a drift watch are the rows of a block: ``ph[i]`` the detector's state
(:func:`models.kernels.drift.ph_step`'s), ``counts[i]`` the slots below, ``bits[i]`` the
last outcomes as a ring (``counts[i, POS]`` the next to write; full, the oldest), and for
stream 0 alone, when ``seqs`` is not empty, their seqs in the same ring. A detection is a
row of ``out`` (the slots ``A_*``), the stream's segment then restarting.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from models.kernels.drift import ph_step
from models.kernels.weighted_majority import half_brier

__all__ = ["bound_run", "bound_trial", "drift_run", "drift_trial", "top_votes"]

# A stream's counts: trials and mistakes in its segment, outcomes in its ring (at most
# the ring's length), the ring's next slot, and the mistakes among them.
TRIALS, MISTAKES, FILLED, POS, ONES = range(5)
COUNTS = 5
# A detection: the stream, the seq, then the stream's counts there and the seq of the
# oldest outcome in its ring (-1: its seqs are not kept).
A_STREAM, A_SEQ, A_ONES, A_FILLED, A_MISTAKES, A_TRIALS, A_SINCE = range(7)
ALERT = 7

# The bound watch's rule (floats) and counts (ints), and what one trial did.
R_PER_LOSS, R_PER_TRIAL, R_DIVISOR, R_BRIER, R_ONE_HOT = range(5)
B_TRIALS, B_OWN, B_OVER = range(3)
UNDER, STILL_OVER, CROSSED, NOT_VOTED, NOT_ONE_HOT, NO_EXPERTS = range(6)
#: a float bound is crossed when the mistakes exceed it by more than this (its rounding)
SLACK = 1e-9
# A crossing in a run: the trial, the learner's mistakes, the best sub-expert and its
# mistakes, the trials of the run.
E_AT, E_OWN, E_BEST, E_BEST_MISTAKES, E_TRIALS = range(5)
EVENT = 5


# -- top votes ----------------------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def _tops(expert, cls, value, size, top, best):  # type: ignore[no-untyped-def]  # pragma: no cover
    """``top[e]`` = sub-expert e's top-voted class (the lowest of its highest votes), -1
    when it does not vote, for e < ``size``; ``best[e]`` its vote."""
    for e in range(size):
        top[e] = -1
    for j in range(expert.shape[0]):
        e = expert[j]
        if e >= size:
            continue
        v, c = value[j], cls[j]
        if top[e] < 0 or v > best[e] or (v == best[e] and c < top[e]):
            top[e] = c
            best[e] = v


@njit(cache=True, nogil=True)
def top_votes(expert, cls, value, size):  # type: ignore[no-untyped-def]  # pragma: no cover
    """The sub-experts below ``size`` that vote, ascending, and each one's top vote."""
    m = 0
    for j in range(expert.shape[0]):
        m = max(m, expert[j] + 1)
    m = min(m, size)
    top = np.empty(max(m, 0), np.int64)
    best = np.empty(max(m, 0))
    _tops(expert, cls, value, m, top, best)
    n = 0
    for e in range(m):
        n += top[e] >= 0
    voters, tops = np.empty(n, np.int64), np.empty(n, np.int64)
    n = 0
    for e in range(m):
        if top[e] >= 0:
            voters[n], tops[n] = e, top[e]
            n += 1
    return voters, tops


# -- the drift watch ----------------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def _outcome(i, seq, bit, ph, counts, bits, seqs, out, n_out):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Stream ``i`` takes outcome ``bit`` at ``seq``; the detections in ``out`` now."""
    ring = bits.shape[1]
    pos = counts[i, POS]
    if counts[i, FILLED] == ring:
        counts[i, ONES] -= bits[i, pos]
    else:
        counts[i, FILLED] += 1
    bits[i, pos] = bit
    counts[i, ONES] += bit
    kept = i == 0 and seqs.shape[0] > 0
    if kept:
        seqs[pos] = seq
    counts[i, POS] = pos + 1 if pos + 1 < ring else 0
    counts[i, TRIALS] += 1
    counts[i, MISTAKES] += bit
    if not ph_step(float(bit), ph[i]):
        return n_out
    filled = counts[i, FILLED]
    out[n_out, A_STREAM], out[n_out, A_SEQ] = i, seq
    out[n_out, A_ONES], out[n_out, A_FILLED] = counts[i, ONES], filled
    out[n_out, A_MISTAKES], out[n_out, A_TRIALS] = counts[i, MISTAKES], counts[i, TRIALS]
    since = -1
    if kept:
        oldest = counts[i, POS] - filled
        since = seqs[oldest + ring if oldest < 0 else oldest]
    out[n_out, A_SINCE] = since
    for k in range(COUNTS):
        counts[i, k] = 0
    return n_out + 1


@njit(cache=True, nogil=True, inline="always")
def _trial(seq, y, wrong, expert, cls, value, ph, counts, bits, seqs, out, n_out, top, best):  # type: ignore[no-untyped-def]  # pragma: no cover
    """One trial: the model's stream (stream 0) takes ``wrong``, then each voting
    sub-expert's (stream 1 + e) whether its top vote was not ``y``, ascending."""
    n_out = _outcome(0, seq, wrong, ph, counts, bits, seqs, out, n_out)
    m = counts.shape[0] - 1
    if m and expert.shape[0]:
        _tops(expert, cls, value, m, top, best)
        for e in range(m):
            if top[e] >= 0:
                n_out = _outcome(1 + e, seq, int(top[e] != y), ph, counts, bits, seqs, out, n_out)
    return n_out


@njit(cache=True, nogil=True)
def drift_trial(seq, y, wrong, expert, cls, value, ph, counts, bits, seqs, out):  # type: ignore[no-untyped-def]  # pragma: no cover
    """One trial of the block's streams (``out`` holds a row per stream); the
    detections."""
    m = counts.shape[0] - 1
    top, best = np.empty(m, np.int64), np.empty(m)
    return _trial(seq, y, wrong, expert, cls, value, ph, counts, bits, seqs, out, 0, top, best)


@njit(cache=True, nogil=True)
def drift_run(first, start, ys, predicted, ptr, expert, cls, value, ph, counts, bits, seqs, out):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Trials ``start`` on of a run (trial t at seq ``first + t``, its sub-experts'
    votes row t of the CSR arrays, ``ptr`` empty when there are none), until ``out``
    may not hold another trial's detections; (the detections, the trial to go on at)."""
    m = counts.shape[0] - 1
    top, best = np.empty(m, np.int64), np.empty(m)
    n_out = 0
    for t in range(start, ys.shape[0]):
        if n_out + m + 1 > out.shape[0]:
            return n_out, t
        y = ys[t]
        wrong = int(predicted[t] != y)
        if ptr.shape[0]:
            a, b = ptr[t], ptr[t + 1]
            n_out = _trial(
                first + t, y, wrong, expert[a:b], cls[a:b], value[a:b],
                ph, counts, bits, seqs, out, n_out, top, best,
            )  # fmt: skip
        else:
            n_out = _outcome(0, first + t, wrong, ph, counts, bits, seqs, out, n_out)
    return n_out, ys.shape[0]


# -- the bound watch ----------------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def _bound(rule, offsets, losses, trials):  # type: ignore[no-untyped-def]  # pragma: no cover
    """(the bound, the sub-expert it is at): the least offset + loss x per_loss (the first
    of equals, a NaN first), plus trials x per_trial, over the divisor."""
    per_loss = rule[R_PER_LOSS]
    best, low = 0, math.inf
    for i in range(offsets.shape[0]):
        cost = offsets[i] + (losses[i] * per_loss if losses[i] > 0 else 0.0)
        if math.isnan(cost):
            best, low = i, cost
            break
        if i == 0 or cost < low:
            best, low = i, cost
    return (low + trials * rule[R_PER_TRIAL]) / rule[R_DIVISOR], best


@njit(cache=True, nogil=True, inline="always")
def _judge(  # type: ignore[no-untyped-def]
    expert, cls, value, y, own_wrong, rule, offsets, losses, mistakes, counts, top, best, scored
):  # pragma: no cover
    """One trial of the bound watch (not suspended); (what it did, the bound, its
    sub-expert)."""
    n = offsets.shape[0]
    _tops(expert, cls, value, n, top, best)
    voted, most = 0, -1
    for e in range(n):
        voted += top[e] >= 0
    for j in range(expert.shape[0]):
        most = max(most, expert[j])
    if voted != n or most >= n:
        return NOT_VOTED, 0.0, 0
    if rule[R_ONE_HOT] != 0.0:
        ok = expert.shape[0] == n
        for j in range(expert.shape[0]):
            ok = ok and value[j] == 1.0
        if not ok:
            return NOT_ONE_HOT, 0.0, 0
    brier = rule[R_BRIER]
    if brier:
        half_brier(expert, cls, value, y, scored)
    for i in range(n):
        wrong = top[i] != y
        mistakes[i] += wrong
        loss = 1.0 if wrong else 0.0
        if brier:
            loss = loss + brier * scored[i]
        losses[i] += loss
    counts[B_TRIALS] += 1
    counts[B_OWN] += own_wrong
    if n == 0:
        return NO_EXPERTS, 0.0, 0
    bound, at = _bound(rule, offsets, losses, counts[B_TRIALS])
    own = counts[B_OWN]
    if own <= bound * (1.0 + SLACK) + SLACK:
        counts[B_OVER] = 0
        return UNDER, bound, at
    if counts[B_OVER]:
        return STILL_OVER, bound, at
    counts[B_OVER] = 1
    return CROSSED, bound, at


@njit(cache=True, nogil=True)
def bound_trial(expert, cls, value, y, own_wrong, rule, offsets, losses, mistakes, counts):  # type: ignore[no-untyped-def]  # pragma: no cover
    """One trial; (what it did, the bound, its sub-expert)."""
    n = offsets.shape[0]
    top, best = np.empty(n, np.int64), np.empty(n)
    scored = np.empty(max(n, expert.shape[0]))
    return _judge(
        expert, cls, value, y, own_wrong, rule, offsets, losses, mistakes, counts,
        top, best, scored,
    )  # fmt: skip


@njit(cache=True, nogil=True)
def bound_run(  # type: ignore[no-untyped-def]
    ys, predicted, ptr, expert, cls, value, rule, offsets, losses, mistakes, counts, events, bounds
):  # pragma: no cover
    """A run of trials (row t of the CSR arrays trial t); the crossings in ``events``
    and ``bounds``, and (their number, the trial that suspended the watch or that had no
    sub-expert, -1 for none, what it did). The trials from a suspension on are counted."""
    n, width = offsets.shape[0], 0
    for t in range(ys.shape[0]):
        width = max(width, ptr[t + 1] - ptr[t])
    top, best = np.empty(n, np.int64), np.empty(n)
    scored = np.empty(max(n, width))
    k = 0
    for t in range(ys.shape[0]):
        a, b = ptr[t], ptr[t + 1]
        y = ys[t]
        code, bound, at = _judge(
            expert[a:b], cls[a:b], value[a:b], y, int(predicted[t] != y), rule,
            offsets, losses, mistakes, counts, top, best, scored,
        )  # fmt: skip
        if NOT_VOTED <= code <= NOT_ONE_HOT:
            counts[B_TRIALS] += ys.shape[0] - t
            return k, t, code
        if code == NO_EXPERTS:
            return k, t, code
        if code == CROSSED:
            events[k, E_AT], events[k, E_OWN], events[k, E_BEST] = t, counts[B_OWN], at
            events[k, E_BEST_MISTAKES], events[k, E_TRIALS] = mistakes[at], counts[B_TRIALS]
            bounds[k] = bound
            k += 1
    return k, -1, UNDER
