"""Compiled votes of subsets' averages (the derived sub-experts of models.inputs.derived)."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["subset_votes"]


@njit(cache=True, nogil=True)
def subset_votes(
    expert: np.ndarray,
    payload: np.ndarray,
    scores: np.ndarray,
    members: np.ndarray,
    live: np.ndarray,
    n: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """``(item, class, value, row)`` of every non-zero average: vote row r is expert
    ``expert[r]``'s vote in payload ``payload[r]`` (a payload's rows together), and
    ``scores[b, r]`` its k scores as ``by`` b reads them; subset d is ``members[d]`` (its
    experts, then -1s), voting while ``live[d]``. Subset d by b is item d * nb + b; its
    value for class c is the mean over its members that vote of their scores for c (each
    divided by their number before the sum, so that finite scores give a finite mean);
    ``row`` is the first vote row of the payload. Triples come sorted by (payload, item,
    class), in two passes: one counts them, one writes them."""
    nb, rows, k = scores.shape
    subsets, widest = members.shape
    at = np.full(n, -1, dtype=np.int64)  # a payload's vote row of each expert
    total = 0
    item = np.empty(0, dtype=np.int64)
    cls = np.empty(0, dtype=np.int64)
    value = np.empty(0, dtype=np.float64)
    first = np.empty(0, dtype=np.int64)
    for writing in range(2):
        if writing:
            item = np.empty(total, dtype=np.int64)
            cls = np.empty(total, dtype=np.int64)
            value = np.empty(total, dtype=np.float64)
            first = np.empty(total, dtype=np.int64)
        j = 0
        start = 0
        while start < rows:
            end = start
            while end < rows and payload[end] == payload[start]:
                at[expert[end]] = end
                end += 1
            for d in range(subsets):
                if not live[d]:
                    continue
                voters = 0
                for s in range(widest):
                    m = members[d, s]
                    if m < 0:
                        break
                    if at[m] >= 0:
                        voters += 1
                if voters == 0:
                    continue
                for b in range(nb):
                    for c in range(k):
                        mean = 0.0
                        for s in range(widest):
                            m = members[d, s]
                            if m < 0:
                                break
                            r = at[m]
                            if r >= 0:
                                mean += scores[b, r, c] / voters
                        if mean == 0.0:
                            continue
                        if writing:
                            item[j] = d * nb + b
                            cls[j] = c
                            value[j] = mean
                            first[j] = start
                        j += 1
            for r in range(start, end):
                at[expert[r]] = -1
            start = end
        total = j
    return item, cls, value, first
