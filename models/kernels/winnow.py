"""Compiled loops of Winnow (Littlestone 1988)."""

from __future__ import annotations

import numpy as np
from numba import njit

from models.kernels.common import dot

__all__ = ["demoted", "fit", "predict"]


@njit(cache=True, nogil=True, inline="always")
def demoted(old, new, floor):  # type: ignore[no-untyped-def]  # pragma: no cover
    """A weight moved from ``old`` to ``new``, held at ``floor`` if a demotion would take it
    below (a weight already below the floor stays where it is); a promotion is unchanged."""
    if new < old and new < floor:
        return old if old < floor else floor
    return new


@njit(cache=True, nogil=True)
def predict(s, lo, hi, strict):  # type: ignore[no-untyped-def]  # pragma: no cover
    if lo < hi:
        if s > hi:
            return 1
        if s < lo:
            return -1
        return 1 if s >= 0.5 * (lo + hi) else -1
    return 1 if (s > lo or (s == lo and not strict)) else -1


@njit(cache=True, nogil=True)
def fit(w, lo, hi, strict, la, lb, eliminate, floor, idx, val, y, force):  # type: ignore[no-untyped-def]  # pragma: no cover
    """One trial; a demotion never takes a weight below ``floor`` (0: no floor)."""
    s = dot(w, idx, val)
    pred = predict(s, lo, hi, strict)
    in_band = lo < hi and lo <= s <= hi
    if idx.shape[0] == 0 or not (force or pred != y or in_band):
        return pred, False
    for j in range(idx.shape[0]):
        i = idx[j]
        if y > 0:
            w[i] *= np.exp(la * val[j])
        elif floor > 0.0:
            w[i] = demoted(w[i], 0.0 if eliminate else w[i] * np.exp(lb * val[j]), floor)
        elif eliminate:
            w[i] = 0.0
        else:
            w[i] *= np.exp(lb * val[j])
    return pred, True
