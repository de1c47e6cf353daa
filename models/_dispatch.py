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

from models import alma, balanced, committee, multiclass_winnow, perceptron, winnow
from models._kernels import argmax_first, runner_up, slice_difference_into

__all__ = [
    "ALMA",
    "BALANCED",
    "COMMITTEE",
    "MULTICLASS_WINNOW",
    "PERCEPTRON",
    "SUBEXPERT",
    "SUBEXPERT_RUNNER_UP",
    "WINNOW",
    "learn_any",
]

WINNOW, BALANCED, PERCEPTRON, ALMA = 0, 1, 2, 3
COMMITTEE, MULTICLASS_WINNOW = 10, 11
#: A sub-expert conversion of binary family f is SUBEXPERT + f (z from the predicted class)
#: or SUBEXPERT_RUNNER_UP + f (z from the runner-up class).
SUBEXPERT, SUBEXPERT_RUNNER_UP = 100, 200


@njit(cache=True, nogil=True)
def binary_fit(fam, W, S, P, idx, val, y, force):  # type: ignore[no-untyped-def]  # pragma: no cover
    if fam == BALANCED:
        pred, status = balanced._fit(W, S, P, idx, val, y, force)
        return pred, status
    if fam == PERCEPTRON:
        pred, upd = perceptron._fit(W[0], P[0], idx, val, y, force)
    elif fam == ALMA:
        pred, upd = alma._fit(W[0], W[1], S, P[0], P[1], P[2], P[3], P[4], P[5], idx, val, y, force)
    else:
        pred, upd = winnow._fit(
            W[0], P[0], P[1], P[2] != 0.0, P[3], P[4], P[5] != 0.0, idx, val, y, force
        )
    return pred, 1 if upd else 0


@njit(cache=True, nogil=True, inline="always")
def weight_scale(base, S, P):  # type: ignore[no-untyped-def]  # pragma: no cover
    """The global scale of family ``base``'s stored weights (ALMA's; 1 for the others)."""
    return alma._scale(S, P[0]) if base == ALMA else 1.0


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
    """s_j = w.x^j with w the effective weights of binary family fam % 100, into ``out``."""
    base = fam % 100
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
    """One trial of the sub-expert conversion (ALGORITHMS.md §1.6) of binary family fam % 100.

    ``wf`` and ``wi`` are scratch space (see models._kernels.scratch).
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
    _, status = binary_fit(fam % 100, W, S, P, wi[:m], wf[k : k + m], 1, pred != y)
    return pred, status


@njit(cache=True, nogil=True)
def learn_any(fam, W, S, P, a, b, v, k, y, wf, wi):  # type: ignore[no-untyped-def]  # pragma: no cover
    """One trial of any family; returns (prediction, status). wf, wi: scratch space."""
    if fam >= SUBEXPERT:
        return subexpert_learn(fam, W, S, P, a, b, v, k, y, wf, wi)
    if fam == COMMITTEE:
        pred, upd = committee._learn(W[0], S, P[0], a, b, v, k, y, wf, wi)
        return pred, 1 if upd else 0
    if fam == MULTICLASS_WINNOW:
        pred, status = multiclass_winnow._learn(W[0], P[0], a, b, v, k, y)
        return pred, status
    return binary_fit(fam, W, S, P, a, v, y, False)
