"""Compiled loops of averaging A-B (Mesterharm & Hsu, §V): running sums of a learner's weights."""

from __future__ import annotations

from numba import njit

from models.kernels.common import argmax_first

__all__ = ["absorb", "averaged", "averaged_predict", "averaged_scores", "weight"]


@njit(cache=True, nogil=True)
def weight(acc, seen, mark, p, t, scale, coef, i):  # type: ignore[no-untyped-def]  # pragma: no cover
    """sum_r coef_r * average_r at coordinate i (B's current weight when t == 0)."""
    w = 0.0
    for r in range(coef.shape[0]):
        a = seen[r, i] * scale if t == 0.0 else (acc[r, i] + seen[r, i] * (p - mark[i])) / t
        w += coef[r] * a
    return w


@njit(cache=True, nogil=True)
def averaged(acc, seen, mark, p, t, scale, coef, idx, out):  # type: ignore[no-untyped-def]  # pragma: no cover
    for j in range(idx.shape[0]):
        out[j] = weight(acc, seen, mark, p, t, scale, coef, idx[j])


@njit(cache=True, nogil=True)
def averaged_scores(acc, seen, mark, p, t, scale, coef, a, b, v, out):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Scores of the averaged hypothesis: out = (m,) for attributes (a = indices, b unused),
    out[j] = sum of w.x^j for sub-experts (a = experts, b = classes). Sums run in the order
    a snapshot's do, so both predict alike."""
    out[:] = 0.0
    for j in range(a.shape[0]):
        w = weight(acc, seen, mark, p, t, scale, coef, a[j])
        out[b[j] if out.shape[0] > 1 else 0] += w * v[j]


@njit(cache=True, nogil=True)
def averaged_predict(acc, seen, mark, totals, scale, coef, a, b, v, out, rule):  # type: ignore[no-untyped-def]  # pragma: no cover
    """The averaged hypothesis' prediction in one call. ``rule`` = (binary, strict, threshold):
    binary predicts class 0 iff m > 0 (or m == 0 when not strict), else the first arg-max."""
    averaged_scores(acc, seen, mark, totals[0], totals[1], scale, coef, a, b, v, out)
    if rule[0] != 0.0:
        m = out[0] - rule[2]
        return 0 if (m > 0.0 or (m == 0.0 and rule[1] == 0.0)) else 1
    return argmax_first(out)


@njit(cache=True, nogil=True)
def absorb(acc, seen, mark, rows, idx, p):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Flush every coordinate of ``idx`` whose value in ``rows`` moved since it was seen."""
    for j in range(idx.shape[0]):
        i = idx[j]
        moved = False
        for r in range(rows.shape[0]):
            if rows[r, i] != seen[r, i]:
                moved = True
        if moved:
            for r in range(rows.shape[0]):
                acc[r, i] += seen[r, i] * (p - mark[i])
                seen[r, i] = rows[r, i]
            mark[i] = p
