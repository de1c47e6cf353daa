"""How a basic learner's state crosses into compiled code: family ids and named slots.

A basic learner exposes ``(family, W, S, P)`` (see :mod:`models.kernels.dispatch`): a family
id from this module, its weights ``W``, its learned scalars ``S`` and its parameters ``P``.
The slots of ``P`` (and the scalars that other loops read) are named here, so packing and
reading agree by name, never by position.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numba import njit

__all__ = [
    "ALMA",
    "BALANCED",
    "COMMITTEE",
    "MULTICLASS_WINNOW",
    "PERCEPTRON",
    "SUBEXPERT",
    "SUBEXPERT_RUNNER_UP",
    "WINNOW",
    "base_family",
    "pack",
    "subexpert_family",
]

# -- family ids ------------------------------------------------------------------------------
WINNOW, BALANCED, PERCEPTRON, ALMA = 0, 1, 2, 3  # binary, over attributes
COMMITTEE, MULTICLASS_WINNOW = 10, 11  # linear-max, over sub-experts
#: A sub-expert conversion of binary family f is SUBEXPERT + f (z from the predicted class)
#: or SUBEXPERT_RUNNER_UP + f (z from the runner-up class).
SUBEXPERT, SUBEXPERT_RUNNER_UP = 100, 200

# -- parameter slots (P) ---------------------------------------------------------------------
WINNOW_LOW, WINNOW_HIGH, WINNOW_STRICT, WINNOW_PROMOTE, WINNOW_DEMOTE, WINNOW_ELIMINATE = range(6)
WINNOW_FLOOR = 6  # the absolute weight floor (0: none)
BALANCED_THETA, BALANCED_PROMOTE, BALANCED_DEMOTE, BALANCED_STRICT, BALANCED_ON_ZERO = range(5)
BALANCED_FLOOR = 5  # the absolute floor of w+ and w- before any shift (0: none)
PERCEPTRON_ETA = 0
ALMA_P, ALMA_ALPHA, ALMA_B, ALMA_C, ALMA_RECOMPUTE_EVERY, ALMA_FOLD_BELOW = range(6)
COMMITTEE_LOG_ALPHA = 0
#: gamma of the relative floor gamma/n * sum(r), and the fixed share (0: off)
COMMITTEE_FLOOR, COMMITTEE_SHARE = 1, 2
MULTICLASS_WINNOW_ALPHA = 0

# -- learned scalars (S) read outside the family's own loops ---------------------------------
ALMA_SCALE, ALMA_NORM_SUM, ALMA_UPDATES, ALMA_FOLDS = range(4)
BALANCED_SHIFT, BALANCED_SHIFTS = range(2)


@njit(cache=True, nogil=True, inline="always")
def base_family(fam):  # type: ignore[no-untyped-def]  # pragma: no cover
    """The binary family a sub-expert conversion runs (any other family: itself)."""
    return fam % SUBEXPERT


def subexpert_family(base: int, runner_up: bool) -> int:
    """The id of the sub-expert conversion of binary family ``base``."""
    return base + (SUBEXPERT_RUNNER_UP if runner_up else SUBEXPERT)


def pack(values: Mapping[int, float]) -> np.ndarray:
    """A parameter vector from ``{slot: value}``; the slots must be 0..n-1, each once."""
    if sorted(values) != list(range(len(values))):
        raise ValueError(f"parameter slots {sorted(values)} are not 0..{len(values) - 1}")
    out = np.empty(len(values))
    for slot, value in values.items():
        out[slot] = float(value)
    return out
