"""Compiled loops of Balanced Winnow (Mesterharm & Hsu, Fig. 1)."""

from __future__ import annotations

import numpy as np
from numba import njit

from models.kernels.families import (
    BALANCED_DEMOTE,
    BALANCED_FLOOR,
    BALANCED_ON_ZERO,
    BALANCED_PROMOTE,
    BALANCED_SHIFT,
    BALANCED_SHIFTS,
    BALANCED_STRICT,
    BALANCED_THETA,
)
from models.kernels.winnow import demoted

__all__ = [
    "CEILING",
    "SHIFT_BITS",
    "factor",
    "fit",
    "fit_batch",
    "margin",
    "shift_suffices",
    "sign",
]


@njit(cache=True, nogil=True)
def margin(w, prm, idx, val):  # type: ignore[no-untyped-def]  # pragma: no cover
    s = 0.0
    for j in range(idx.shape[0]):
        i = idx[j]
        s += (w[i, 0] - w[i, 1]) * val[j]
    return s - prm[BALANCED_THETA]


@njit(cache=True, nogil=True)
def sign(w, prm, idx, val):  # type: ignore[no-untyped-def]  # pragma: no cover
    m = margin(w, prm, idx, val)
    return 1 if (m > 0.0 or (m == 0.0 and prm[BALANCED_STRICT] == 0.0)) else -1


@njit(cache=True, nogil=True)
def factor(log_factor, x, unit):  # type: ignore[no-untyped-def]  # pragma: no cover
    return unit if x == 1.0 else np.exp(log_factor * x)


#: With threshold 0 only the ratios of the weights matter, so when a weight would pass
#: CEILING every weight is divided by 2**SHIFT_BITS (exact for every weight above 2**-1074,
#: below which a weight vanishes) and the shift is recorded; with another threshold such an
#: update is refused instead, and so is one that would pass CEILING even after a shift
#: (a factor alpha or 1/beta of 2**_SAFE_LOG2 or more; see ``BalancedWinnow.can_refuse``).
CEILING = 2.0**900


SHIFT_BITS = 600.0


@njit(cache=True, nogil=True)
def fit(w, sc, prm, idx, val, y, force):  # type: ignore[no-untyped-def]  # pragma: no cover
    """One trial. Returns (predicted sign, status): 0 no update, 1 updated, 2 refused.

    ``sc`` = [total shift in bits, number of shifts]. A refused update leaves the weights
    as they were. A demotion never takes a weight below the floor ``prm[BALANCED_FLOOR]``,
    divided as every weight was by the shifts (so a shift changes no prediction).
    """
    m = margin(w, prm, idx, val)
    pred = 1 if (m > 0.0 or (m == 0.0 and prm[BALANCED_STRICT] == 0.0)) else -1
    if idx.shape[0] == 0 or not (force or pred != y or (prm[BALANCED_ON_ZERO] != 0.0 and m == 0.0)):
        return pred, 0
    up, down = (
        (prm[BALANCED_PROMOTE], prm[BALANCED_DEMOTE])
        if y > 0
        else (prm[BALANCED_DEMOTE], prm[BALANCED_PROMOTE])
    )
    eu, ed = np.exp(up), np.exp(down)
    for j in range(idx.shape[0]):
        i = idx[j]
        a = w[i, 0] * factor(up, val[j], eu)
        b = w[i, 1] * factor(down, val[j], ed)
        if not (a < CEILING and b < CEILING):
            if prm[BALANCED_THETA] != 0.0 or not shift_suffices(w, idx, val, up, down, eu, ed):
                return pred, 2
            w *= 2.0**-SHIFT_BITS
            sc[BALANCED_SHIFT] += SHIFT_BITS
            sc[BALANCED_SHIFTS] += 1.0
            break
    floor = prm[BALANCED_FLOOR]
    if floor > 0.0:
        floor *= 2.0 ** -sc[BALANCED_SHIFT]
        for j in range(idx.shape[0]):
            i = idx[j]
            w[i, 0] = demoted(w[i, 0], w[i, 0] * factor(up, val[j], eu), floor)
            w[i, 1] = demoted(w[i, 1], w[i, 1] * factor(down, val[j], ed), floor)
        return pred, 1
    for j in range(idx.shape[0]):
        i = idx[j]
        w[i, 0] *= factor(up, val[j], eu)
        w[i, 1] *= factor(down, val[j], ed)
    return pred, 1


@njit(cache=True, nogil=True)
def shift_suffices(w, idx, val, up, down, eu, ed):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Whether, after a shift, the update keeps every weight it moves below CEILING."""
    f = 2.0**-SHIFT_BITS
    for j in range(idx.shape[0]):
        i = idx[j]
        a = (w[i, 0] * f) * factor(up, val[j], eu)
        b = (w[i, 1] * f) * factor(down, val[j], ed)
        if not (a < CEILING and b < CEILING):
            return False
    return True


@njit(cache=True, nogil=True)
def fit_batch(w, sc, prm, indptr, idx, val, ys, mistakes, updates):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Trials in order; returns how many were applied (fewer if one was refused)."""
    for t in range(ys.shape[0]):
        lo, hi = indptr[t], indptr[t + 1]
        pred, status = fit(w, sc, prm, idx[lo:hi], val[lo:hi], ys[t], False)
        if status == 2:
            mistakes[t] = pred != ys[t]  # read back for the refusal, then cleared
            return t
        mistakes[t] = pred != ys[t]
        updates[t] = status == 1
    return ys.shape[0]
