"""Compiled steps of the drift detectors of :mod:`models.drift`, ADWIN (Bifet & Gavaldà
2007) and Page-Hinkley (Page 1954), and the named slots of their state arrays.

A detector's state is a few numpy arrays, its parameters in the first slots; one step
(``adwin_step``, ``ph_step``) takes one value, one run (``adwin_run``, ``ph_run``) a
stream, calling the same step, and writes the indices where a drift was detected.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["MODES", "ROWS", "adwin_run", "adwin_step", "ph_clear", "ph_run", "ph_step"]

#: ADWIN's bucket rows: row i holds buckets of 2**i values, so 64 rows hold any window
#: an int64 can count.
ROWS = 64

# ADWIN's slots, its parameters first (a compiled call costs less with fewer arrays):
# ints = [clock, max_buckets, rows in use, tick modulo clock, detected, count of row 0,
# ...], floats = [delta, min_window_length, grace_period, total, variance, width], and
# rows[i, TOTALS | VARIANCES, k] is bucket k of row i.
CLOCK, MAX_B, N_ROWS, TICK, DETECTED, COUNTS = range(6)
DELTA, MIN_LEN, GRACE, TOTAL, VARIANCE, WIDTH = range(6)
TOTALS, VARIANCES = 0, 1

# Page-Hinkley's slots in its one state array: its parameters (the mode as its index in
# MODES), then its state (the detection flag as 0.0 or 1.0).
PH_MIN_N, PH_DELTA, PH_THRESHOLD, PH_ALPHA, PH_MODE = range(5)
PH_N, PH_MEAN, PH_SUM_UP, PH_SUM_DOWN, PH_MIN_UP, PH_MAX_DOWN, PH_DETECTED = range(5, 12)
MODES = ("up", "down", "both")
UP, DOWN, BOTH = range(3)


# -- ADWIN's compiled step ----------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def _adwin_clear(
    rows: np.ndarray, ints: np.ndarray, floats: np.ndarray
) -> None:  # pragma: no cover
    rows[...] = 0.0
    ints[N_ROWS:] = 0
    ints[N_ROWS] = 1
    floats[TOTAL:] = 0.0


@njit(cache=True, nogil=True, inline="always")
def _shift(rows: np.ndarray, ints: np.ndarray, row: int, by: int) -> None:  # pragma: no cover
    """Drop the first ``by`` buckets of ``row``."""
    count = ints[COUNTS + row]
    for k in range(count - by):
        rows[row, TOTALS, k] = rows[row, TOTALS, k + by]
        rows[row, VARIANCES, k] = rows[row, VARIANCES, k + by]
    for k in range(count - by, count):
        rows[row, TOTALS, k] = 0.0
        rows[row, VARIANCES, k] = 0.0
    ints[COUNTS + row] = count - by


@njit(cache=True, nogil=True, inline="always")
def _adwin_insert(
    x: float, rows: np.ndarray, ints: np.ndarray, floats: np.ndarray
) -> None:  # pragma: no cover
    """Add ``x`` as a bucket of row 0, then merge the two oldest buckets of each full row."""
    max_buckets = ints[MAX_B]
    rows[0, TOTALS, ints[COUNTS]] = x
    rows[0, VARIANCES, ints[COUNTS]] = 0.0
    ints[COUNTS] += 1
    width = floats[WIDTH] + 1.0
    floats[WIDTH] = width
    increment = 0.0
    if width > 1.0:
        d = x - floats[TOTAL] / (width - 1.0)
        increment = (width - 1.0) * d * d / width
    floats[VARIANCE] += increment
    floats[TOTAL] += x
    row = 0
    while ints[COUNTS + row] == max_buckets + 1:
        n1 = math.ldexp(1.0, row)
        t0, t1 = rows[row, TOTALS, 0], rows[row, TOTALS, 1]
        mu1, mu2 = t0 / n1, t1 / n1
        merged = (
            rows[row, VARIANCES, 0] + rows[row, VARIANCES, 1] + n1 * 0.5 * (mu1 - mu2) * (mu1 - mu2)
        )
        if row + 1 >= ints[N_ROWS]:
            ints[N_ROWS] = row + 2
        k = ints[COUNTS + row + 1]
        rows[row + 1, TOTALS, k] = t0 + t1
        rows[row + 1, VARIANCES, k] = merged
        ints[COUNTS + row + 1] = k + 1
        _shift(rows, ints, row, 2)
        if k + 1 <= max_buckets:
            break
        row += 1


@njit(cache=True, nogil=True, inline="always")
def _adwin_drop_oldest(
    rows: np.ndarray, ints: np.ndarray, floats: np.ndarray
) -> None:  # pragma: no cover
    last = ints[N_ROWS] - 1
    n = math.ldexp(1.0, last)
    u, v = rows[last, TOTALS, 0], rows[last, VARIANCES, 0]
    mu = u / n
    floats[WIDTH] -= n
    floats[TOTAL] -= u
    width = floats[WIDTH]
    mu_window = floats[TOTAL] / width
    floats[VARIANCE] -= v + n * width * (mu - mu_window) * (mu - mu_window) / (n + width)
    _shift(rows, ints, last, 1)
    # Drop the empty rows at the old end. River drops only the row just emptied, and
    # panics when it next drops from an empty row (max_buckets=1 leaves rows empty).
    while ints[N_ROWS] > 1 and ints[COUNTS + ints[N_ROWS] - 1] == 0:
        ints[N_ROWS] -= 1


@njit(cache=True, nogil=True, inline="always")
def _adwin_detect(
    rows: np.ndarray, ints: np.ndarray, floats: np.ndarray
) -> bool:  # pragma: no cover
    """Every ``clock`` steps: drop the oldest bucket while some cut of the window, oldest
    values first, splits it into two sub-windows whose means differ by more than
    epsilon_cut (River's arithmetic, its terms that depend on the window alone computed
    once per pass)."""
    tick = ints[TICK] + 1
    ints[TICK] = 0 if tick == ints[CLOCK] else tick
    if tick != ints[CLOCK] or not floats[WIDTH] > floats[GRACE]:
        return False
    min_len = floats[MIN_LEN]
    found = False
    again = True
    while again:
        again = False
        width = floats[WIDTH]
        delta_prime = math.log(2.0 * math.log(width) / floats[DELTA])
        spread = floats[VARIANCE] / width
        n0, n1, u0, u1 = 0.0, width, 0.0, floats[TOTAL]
        for row in range(ints[N_ROWS] - 1, -1, -1):
            size = math.ldexp(1.0, row)
            count = ints[COUNTS + row]
            for k in range(count):
                n0 += size
                n1 -= size
                t = rows[row, TOTALS, k]
                u0 += t
                u1 -= t
                if row == 0 and k == count - 1:  # the newest value is never a cut
                    break
                if n1 < min_len or n0 < min_len:
                    continue
                delta_mean = u0 / n0 - u1 / n1
                m_recip = 1.0 / (n0 - min_len + 1.0) + 1.0 / (n1 - min_len + 1.0)
                epsilon = (
                    math.sqrt(2.0 * m_recip * spread * delta_prime)
                    + 2.0 / 3.0 * delta_prime * m_recip
                )
                if abs(delta_mean) > epsilon:
                    found = again = True
                    if width > 0.0:
                        _adwin_drop_oldest(rows, ints, floats)
                        break
            if again:
                break
    return found


@njit(cache=True, nogil=True, inline="always")
def adwin_step(
    x: float, rows: np.ndarray, ints: np.ndarray, floats: np.ndarray
) -> bool:  # pragma: no cover
    if ints[DETECTED]:
        _adwin_clear(rows, ints, floats)
    _adwin_insert(x, rows, ints, floats)
    found = _adwin_detect(rows, ints, floats)
    ints[DETECTED] = found
    return found


@njit(cache=True, nogil=True)
def adwin_run(
    xs: np.ndarray, rows: np.ndarray, ints: np.ndarray, floats: np.ndarray, fired: np.ndarray
) -> int:  # pragma: no cover
    n = 0
    for t in range(xs.shape[0]):
        if adwin_step(xs[t], rows, ints, floats):
            fired[n] = t
            n += 1
    return n


# -- Page-Hinkley's compiled step ---------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def ph_clear(state: np.ndarray) -> None:  # pragma: no cover
    state[PH_N:] = 0.0
    state[PH_MIN_UP] = math.inf
    state[PH_MAX_DOWN] = -1.0  # River's starting value


@njit(cache=True, nogil=True, inline="always")
def ph_step(x: float, state: np.ndarray) -> bool:  # pragma: no cover
    delta, threshold, alpha, mode = (
        state[PH_DELTA],
        state[PH_THRESHOLD],
        state[PH_ALPHA],
        state[PH_MODE],
    )
    if state[PH_DETECTED] != 0.0:
        ph_clear(state)
    n = state[PH_N] + 1.0
    state[PH_N] = n
    state[PH_MEAN] += (1.0 / n) * (x - state[PH_MEAN])
    dev = x - state[PH_MEAN]
    up = alpha * state[PH_SUM_UP] + dev - delta
    down = alpha * state[PH_SUM_DOWN] + dev + delta
    state[PH_SUM_UP], state[PH_SUM_DOWN] = up, down
    if up < state[PH_MIN_UP]:
        state[PH_MIN_UP] = up
    if down > state[PH_MAX_DOWN]:
        state[PH_MAX_DOWN] = down
    if n < state[PH_MIN_N]:
        return False
    rise, fall = up - state[PH_MIN_UP], state[PH_MAX_DOWN] - down
    if mode == UP:
        found = rise > threshold
    elif mode == DOWN:
        found = fall > threshold
    else:
        found = rise > threshold or fall > threshold
    state[PH_DETECTED] = 1.0 if found else 0.0
    return found


@njit(cache=True, nogil=True)
def ph_run(xs: np.ndarray, state: np.ndarray, fired: np.ndarray) -> int:  # pragma: no cover
    n = 0
    for t in range(xs.shape[0]):
        if ph_step(xs[t], state):
            fired[n] = t
            n += 1
    return n
