"""One compiled entry to every basic learner's trial, for wrappers that loop in numba.

A basic learner exposes its state as ``(family, W, S, P)``: a family id, a 2-d float array of
weights, a 1-d float array of learned scalars and a 1-d float array of parameters (see each
learner's ``kernel_state``). :func:`learn_any` runs one trial of any family on that state, so
a wrapper such as instance recycling can run its inner loop without returning to Python.
Binary families read an instance as (indices, -, values) and a label as +1/-1; multi-class
families read (experts, classes, values) and a class index. Status: 0 no update, 1 updated,
2 an update refused because a weight would overflow (the state is unchanged).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from models.kernels import alma, balanced, committee, multiclass_winnow, perceptron, winnow
from models.kernels.common import argmax_first, runner_up, slice_difference_into
from models.kernels.families import (
    ALMA,
    ALMA_ALPHA,
    ALMA_B,
    ALMA_C,
    ALMA_FOLD_BELOW,
    ALMA_P,
    ALMA_RECOMPUTE_EVERY,
    BALANCED,
    COMMITTEE,
    COMMITTEE_FLOOR,
    COMMITTEE_LOG_ALPHA,
    COMMITTEE_SHARE,
    MULTICLASS_WINNOW,
    MULTICLASS_WINNOW_ALPHA,
    PERCEPTRON,
    PERCEPTRON_ETA,
    SUBEXPERT,
    SUBEXPERT_RUNNER_UP,
    WINNOW_DEMOTE,
    WINNOW_ELIMINATE,
    WINNOW_FLOOR,
    WINNOW_HIGH,
    WINNOW_LOW,
    WINNOW_PROMOTE,
    WINNOW_STRICT,
    base_family,
)

__all__ = [
    "binary_fit",
    "binary_fit_batch",
    "effective_weight",
    "learn_any",
    "subexpert_learn",
    "subexpert_predict",
    "subexpert_scores",
    "subexpert_scores_into",
    "weight_scale",
]


@njit(cache=True, nogil=True)
def binary_fit(fam, W, S, P, idx, val, y, force):  # type: ignore[no-untyped-def]  # pragma: no cover
    if fam == BALANCED:
        pred, status = balanced.fit(W, S, P, idx, val, y, force)
        return pred, status
    if fam == PERCEPTRON:
        pred, upd = perceptron.fit(W[0], P[PERCEPTRON_ETA], idx, val, y, force)
    elif fam == ALMA:
        pred, upd = alma.fit(
            W[0], W[1], S, P[ALMA_P], P[ALMA_ALPHA], P[ALMA_B], P[ALMA_C],
            P[ALMA_RECOMPUTE_EVERY], P[ALMA_FOLD_BELOW], idx, val, y, force,
        )  # fmt: skip
    else:
        pred, upd = winnow.fit(
            W[0],
            P[WINNOW_LOW],
            P[WINNOW_HIGH],
            P[WINNOW_STRICT] != 0.0,
            P[WINNOW_PROMOTE],
            P[WINNOW_DEMOTE],
            P[WINNOW_ELIMINATE] != 0.0,
            P[WINNOW_FLOOR],
            idx,
            val,
            y,
            force,
        )
    return pred, 1 if upd else 0


@njit(cache=True, nogil=True)
def binary_fit_batch(fam, W, S, P, indptr, idx, val, ys, mistakes, updates):  # type: ignore[no-untyped-def]  # pragma: no cover
    """:func:`binary_fit` of each row ``t`` (``indptr[t]:indptr[t + 1]``) with sign
    ``ys[t]``, in order, into ``mistakes`` and ``updates``; returns the rows applied,
    fewer than all when one was refused (its mistake is left in ``mistakes`` to be read
    back, and nothing after it is applied)."""
    for t in range(ys.shape[0]):
        lo, hi = indptr[t], indptr[t + 1]
        pred, status = binary_fit(fam, W, S, P, idx[lo:hi], val[lo:hi], ys[t], False)
        mistakes[t] = pred != ys[t]
        if status == 2:
            return t
        updates[t] = status == 1
    return ys.shape[0]


@njit(cache=True, nogil=True, inline="always")
def weight_scale(base, S, P):  # type: ignore[no-untyped-def]  # pragma: no cover
    """The global scale of family ``base``'s stored weights (ALMA's; 1 for the others)."""
    return alma.norm_scale(S, P[ALMA_P]) if base == ALMA else 1.0


@njit(cache=True, nogil=True, inline="always")
def effective_weight(base, W, scale, i):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Sub-expert i's weight for a linear-max score, in the form every sum here uses."""
    if base == BALANCED:
        return W[i, 0] - W[i, 1]
    if base == ALMA:
        return scale * W[1, i]
    return W[0, i]


@njit(cache=True, nogil=True)
def subexpert_scores_into(fam, W, S, P, expert, cls, value, out):  # type: ignore[no-untyped-def]  # pragma: no cover
    """s_j = w.x^j with w the effective weights of binary family base_family(fam), into ``out``."""
    base = base_family(fam)
    scale = weight_scale(base, S, P)
    out[:] = 0.0
    for j in range(expert.shape[0]):
        out[cls[j]] += effective_weight(base, W, scale, expert[j]) * value[j]


@njit(cache=True, nogil=True)
def subexpert_scores(fam, W, S, P, expert, cls, value, k):  # type: ignore[no-untyped-def]  # pragma: no cover
    s = np.zeros(k)
    subexpert_scores_into(fam, W, S, P, expert, cls, value, s)
    return s


@njit(cache=True, nogil=True)
def subexpert_predict(fam, W, S, P, expert, cls, value, out):  # type: ignore[no-untyped-def]  # pragma: no cover
    subexpert_scores_into(fam, W, S, P, expert, cls, value, out)
    return argmax_first(out)


@njit(cache=True, nogil=True)
def subexpert_learn(fam, W, S, P, expert, cls, value, k, y, wf, wi):  # type: ignore[no-untyped-def]  # pragma: no cover
    """One trial of the sub-expert conversion (Mesterharm & Hsu, §III) of binary family
    ``base_family(fam)``.

    ``wf`` and ``wi`` are scratch space (see models.kernels.common.scratch).
    """
    s = wf[:k]
    subexpert_scores_into(fam, W, S, P, expert, cls, value, s)
    pred = argmax_first(s)
    use_runner_up = fam >= SUBEXPERT_RUNNER_UP
    if pred == y and not use_runner_up:
        return pred, 0
    other = pred if pred != y else runner_up(s, y)
    m = slice_difference_into(expert, cls, value, y, other, wi, wf[k:])
    if m == 0:
        return pred, 0
    _, status = binary_fit(base_family(fam), W, S, P, wi[:m], wf[k : k + m], 1, pred != y)
    return pred, status


@njit(cache=True, nogil=True)
def learn_any(fam, W, S, P, a, b, v, k, y, wf, wi):  # type: ignore[no-untyped-def]  # pragma: no cover
    """One trial of any family; returns (prediction, status). wf, wi: scratch space."""
    if fam >= SUBEXPERT:
        return subexpert_learn(fam, W, S, P, a, b, v, k, y, wf, wi)
    if fam == COMMITTEE:
        pred, upd = committee.learn(
            W[0], S, P[COMMITTEE_LOG_ALPHA], P[COMMITTEE_FLOOR], P[COMMITTEE_SHARE],
            a, b, v, k, y, wf, wi,
        )  # fmt: skip
        return pred, 1 if upd else 0
    if fam == MULTICLASS_WINNOW:
        pred, status = multiclass_winnow.learn(W[0], P[MULTICLASS_WINNOW_ALPHA], a, b, v, k, y)
        return pred, status
    return binary_fit(fam, W, S, P, a, v, y, False)
