"""Compiled loop of the Perceptron (Rosenblatt's rule; Mesterharm & Hsu, §III)."""

from __future__ import annotations

from numba import njit

from models.kernels.common import dot

__all__ = ["fit"]


@njit(cache=True, nogil=True)
def fit(w, eta, idx, val, y, force):  # type: ignore[no-untyped-def]  # pragma: no cover
    m = dot(w, idx, val)
    pred = 1 if m >= 0.0 else -1
    if idx.shape[0] == 0 or not (force or y * m <= 0.0):
        return pred, False
    for j in range(idx.shape[0]):
        w[idx[j]] += eta * y * val[j]
    return pred, True
