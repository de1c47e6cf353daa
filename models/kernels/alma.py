"""Compiled loops of ALMA_p (Gentile 2001)."""

from __future__ import annotations

import numpy as np
from numba import njit

from models.kernels.families import ALMA_FOLDS, ALMA_NORM_SUM, ALMA_SCALE, ALMA_UPDATES

__all__ = ["S_FLOOR", "exact_s", "fit", "lift", "margin", "norm_scale", "power", "powers", "primal"]


#: The least S = sum |phi_i|^p kept after a correction (unless theta is 0): below it the
#: scale c / S^((p-2)/p) of a large p could pass the float range (while each weight stays
#: below 1), so phi is multiplied up by a power of 2 and c divided by it (``lift``).
S_FLOOR = 1e-250

#: A theta none of whose coordinates reaches this is taken as 0 by ``lift``.
THETA_TINY = 1e-300


@njit(cache=True, nogil=True)
def norm_scale(sc: np.ndarray, p: float) -> float:  # pragma: no cover
    """w_i = scale * sign(phi_i)|phi_i|^(p-1), scale = c / S^((p-2)/p); 0 when S = 0."""
    if sc[ALMA_NORM_SUM] <= 0.0:
        return 0.0
    return sc[ALMA_SCALE] / sc[ALMA_NORM_SUM] ** ((p - 2.0) / p)


@njit(cache=True, nogil=True)
def power(f: float, p: float) -> float:  # pragma: no cover
    """sign(f)|f|^(p-1): the primal weight before the global scale."""
    if f > 0.0:
        return f ** (p - 1.0)
    if f < 0.0:
        return -((-f) ** (p - 1.0))
    return 0.0


@njit(cache=True, nogil=True)
def powers(phi: np.ndarray, p: float, out: np.ndarray) -> None:  # pragma: no cover
    for i in range(phi.shape[0]):
        out[i] = power(phi[i], p)


@njit(cache=True, nogil=True)
def primal(
    u: np.ndarray, sc: np.ndarray, p: float, idx: np.ndarray
) -> np.ndarray:  # pragma: no cover
    scale = norm_scale(sc, p)
    out = np.zeros(idx.shape[0])
    for j in range(idx.shape[0]):
        out[j] = scale * u[idx[j]]
    return out


@njit(cache=True, nogil=True)
def margin(
    u: np.ndarray, sc: np.ndarray, p: float, idx: np.ndarray, val: np.ndarray
) -> float:  # pragma: no cover
    scale = norm_scale(sc, p)
    m = 0.0
    for j in range(idx.shape[0]):
        m += scale * u[idx[j]] * val[j]
    return m


@njit(cache=True, nogil=True)
def exact_s(phi: np.ndarray, p: float) -> float:  # pragma: no cover
    s = 0.0
    for i in range(phi.shape[0]):
        s += abs(phi[i]) ** p
    return s


@njit(cache=True, nogil=True)
def fit(phi, u, sc, p, alpha, b, c_rate, every, fold, idx, val, y, force):  # type: ignore[no-untyped-def]  # pragma: no cover
    """One trial of ALMA_p in dual form, O(active) amortised. Returns (predicted sign, updated)."""
    top = 0.0
    for j in range(idx.shape[0]):
        top = max(top, abs(val[j]))
    if top == 0.0:  # x = 0: predict +1, never learn
        return 1, False
    acc = 0.0
    for j in range(idx.shape[0]):
        acc += (abs(val[j]) / top) ** p
    xnorm = top * acc ** (1.0 / p)
    m = margin(u, sc, p, idx, val)
    pred = 1 if m >= 0.0 else -1
    k = sc[ALMA_UPDATES]
    gamma = b * np.sqrt(p - 1.0) / np.sqrt(k)
    if not (force or y * (m / xnorm) <= (1.0 - alpha) * gamma):
        return pred, False
    if sc[ALMA_SCALE] ** p < fold:  # fold c into phi before 1/c gets large enough to overflow S
        for i in range(phi.shape[0]):
            phi[i] *= sc[ALMA_SCALE]
        sc[ALMA_SCALE] = 1.0
        sc[ALMA_NORM_SUM] = exact_s(phi, p)
        sc[ALMA_FOLDS] += 1.0
        powers(phi, p, u)
    c = sc[ALMA_SCALE]
    # phi moves by eta_k y x / (||x||_p c): x / ||x||_p is within [-1, 1] whatever the
    # scale of x, and c^p >= fold here, so the step stays finite for any finite x.
    step = c_rate / (np.sqrt(p - 1.0) * np.sqrt(k)) * y / c
    added = 0.0
    removed = 0.0
    for j in range(idx.shape[0]):
        i = idx[j]
        removed += abs(phi[i]) ** p
        phi[i] += step * (val[j] / xnorm)
        u[i] = power(phi[i], p)
        added += abs(phi[i]) ** p
    s = (sc[ALMA_NORM_SUM] + added) - removed
    k += 1.0
    if s < 1e-4 * (sc[ALMA_NORM_SUM] + added) or (k - 1.0) % every == 0.0:
        s = exact_s(phi, p)  # heavy cancellation, or the periodic resync
    sc[ALMA_NORM_SUM] = s
    norm = c * s ** (1.0 / p)
    if norm > 1.0:  # project theta onto the unit p-ball (w onto the unit q-ball)
        sc[ALMA_SCALE] = c / norm
    sc[ALMA_UPDATES] = k
    if s < S_FLOOR:
        lift(phi, u, sc, p)
    return pred, True


@njit(cache=True, nogil=True)
def lift(phi, u, sc, p):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Rewrite theta = c * phi with the largest |phi_i| in [1, 2), exactly (a power of 2
    moves from c to phi), so that S is at least 1; a theta below THETA_TINY becomes 0.
    The weights do not change; like a fold, it counts as a global rescale."""
    top = 0.0
    for i in range(phi.shape[0]):
        top = max(top, abs(phi[i]))
    if top == 0.0:
        sc[ALMA_NORM_SUM] = 0.0
        return
    c = sc[ALMA_SCALE]
    if c * top < THETA_TINY:
        phi[:] = 0.0
        c = 1.0
    else:
        e = np.floor(np.log2(top))
        phi *= 2.0**-e
        c *= 2.0**e
    sc[ALMA_SCALE] = c
    sc[ALMA_NORM_SUM] = exact_s(phi, p)
    sc[ALMA_FOLDS] += 1.0
    powers(phi, p, u)
