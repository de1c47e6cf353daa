"""ADWIN, adaptive windowing (Bifet & Gavaldà 2007), as River's ``drift.ADWIN`` computes it.

References
----------
A. Bifet and R. Gavaldà, "Learning from time-changing data with adaptive windowing",
SIAM International Conference on Data Mining (2007) 443-448. River's ``river/drift/adwin.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from models.core.params import Constraint, Integer, Real
from models.core.state import InvalidState, expect_keys
from models.drift.base import COUNT_LIMIT, DriftDetector, count_at, number_at
from models.kernels.drift import (
    CLOCK,
    COUNTS,
    DELTA,
    DETECTED,
    GRACE,
    MAX_B,
    MIN_LEN,
    N_ROWS,
    ROWS,
    TICK,
    TOTAL,
    TOTALS,
    VARIANCE,
    VARIANCES,
    WIDTH,
    adwin_run,
    adwin_step,
)

__all__ = ["ADWIN", "CLOCK_LIMIT", "MAX_BUCKETS"]

#: The largest ``max_buckets`` (each detector keeps 64 x (max_buckets + 1) x 2 floats).
MAX_BUCKETS = 100
#: River's ADWIN counts ticks in a 32-bit integer.
CLOCK_LIMIT = 2**31 - 1


class ADWIN(DriftDetector):
    """ADWIN2, adaptive windowing over exponential histogram buckets (Bifet & Gavaldà 2007),
    as River's ``drift.ADWIN`` computes it.

    The window is kept as rows of at most ``max_buckets`` buckets, row i summarising 2**i
    values by their total and variance. Every ``clock`` values, once the window holds more
    than ``grace_period``, each cut of it into an older and a newer sub-window of at least
    ``min_window_length`` values is tested, and while some cut's means differ by more than
    ``epsilon_cut`` (a bound at confidence ``delta``) the oldest bucket is dropped and a
    drift is reported. The update after a drift starts from an empty window.

    Parameters
    ----------
    delta
        Confidence, in (0, 1); smaller raises fewer false alarms and detects later. The
        default 1e-5 (River's is 0.002) keeps a mistake stream of 100,000 trials free of
        false alarms (see the notes of :mod:`models.drift`).
    clock
        Test every this many values, in [1, 2**31 - 1].
    max_buckets
        Buckets per row before two merge, in [1, 100].
    min_window_length
        The least number of values on each side of a cut, in [1, 2**53].
    grace_period
        No test until the window holds more than this many values, in [0, 2**53].

    Examples
    --------
    >>> adwin = ADWIN()
    >>> stream = np.r_[np.zeros(1000), np.ones(1000)]
    >>> adwin.update_many(stream).tolist()
    [1023]
    >>> adwin.width  # the values after the drift
    976
    """

    kind = "adwin"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "delta": Real(0.0, 1.0, low_open=True, high_open=True),
        "clock": Integer(1, CLOCK_LIMIT),
        "max_buckets": Integer(1, MAX_BUCKETS),
        "min_window_length": Integer(1, COUNT_LIMIT),
        "grace_period": Integer(0, COUNT_LIMIT),
    }

    def __init__(
        self,
        delta: float = 1e-5,
        clock: int = 32,
        max_buckets: int = 5,
        min_window_length: int = 5,
        grace_period: int = 10,
    ) -> None:
        self.delta = delta
        self.clock = clock
        self.max_buckets = max_buckets
        self.min_window_length = min_window_length
        self.grace_period = grace_period
        self._initialise()

    def reset(self) -> None:
        self.rows_, self.ints_, self.floats_ = self._empty()

    def _empty(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """An empty window's arrays, the parameters in their slots."""
        rows = np.zeros((ROWS, 2, self.max_buckets + 1))
        ints = np.zeros(COUNTS + ROWS, dtype=np.int64)
        ints[CLOCK], ints[MAX_B], ints[N_ROWS] = self.clock, self.max_buckets, 1
        floats = np.zeros(WIDTH + 1)
        floats[DELTA], floats[MIN_LEN] = self.delta, self.min_window_length
        floats[GRACE] = self.grace_period
        return rows, ints, floats

    def _step(self, x: float) -> bool:
        return bool(adwin_step(x, self.rows_, self.ints_, self.floats_))

    def _run(self, xs: np.ndarray, fired: np.ndarray) -> int:
        return int(adwin_run(xs, self.rows_, self.ints_, self.floats_, fired))

    @property
    def drift_detected(self) -> bool:
        return bool(self.ints_[DETECTED])

    @property
    def width(self) -> int:
        """How many values the window holds."""
        return int(self.floats_[WIDTH])

    @property
    def estimation(self) -> float:
        """The mean of the window (0 when it is empty)."""
        width = self.floats_[WIDTH]
        return float(self.floats_[TOTAL] / width) if width else 0.0

    def _export(self) -> dict[str, Any]:
        n_rows = int(self.ints_[N_ROWS])
        counts = self.ints_[COUNTS : COUNTS + n_rows]
        return {
            "total": float(self.floats_[TOTAL]),
            "variance": float(self.floats_[VARIANCE]),
            "tick": int(self.ints_[TICK]),
            "drift_detected": bool(self.ints_[DETECTED]),
            "totals": [self.rows_[i, TOTALS, :c].tolist() for i, c in enumerate(counts)],
            "variances": [self.rows_[i, VARIANCES, :c].tolist() for i, c in enumerate(counts)],
        }

    def _import(self, doc: Any) -> None:
        what = "drift.state"
        keys = {"total", "variance", "tick", "drift_detected", "totals", "variances"}
        doc = expect_keys(doc, what, keys)
        total, variance = number_at(doc, "total", what), number_at(doc, "variance", what)
        tick = count_at(doc, "tick", what, self.clock - 1)
        if not isinstance(doc["drift_detected"], bool):
            raise InvalidState(f"{what}.drift_detected: expected true or false")
        rows, ints, floats = self._empty()
        for slot, name in ((TOTALS, "totals"), (VARIANCES, "variances")):
            lists = doc[name]
            if not isinstance(lists, list) or not 1 <= len(lists) <= ROWS:
                raise InvalidState(f"{what}.{name}: expected a list of 1 to {ROWS} lists")
            if len(lists) > 1 and not lists[-1]:
                raise InvalidState(f"{what}.{name}: the last row must not be empty")
            for i, row in enumerate(lists):
                if not isinstance(row, list) or len(row) > self.max_buckets:
                    raise InvalidState(
                        f"{what}.{name}[{i}]: expected a list of at most "
                        f"{self.max_buckets} numbers (max_buckets)"
                    )
                if slot == TOTALS:
                    ints[COUNTS + i] = len(row)
                elif len(lists) != ints[N_ROWS] or len(row) != ints[COUNTS + i]:
                    raise InvalidState(f"{what}: variances and totals differ in shape")
                for k in range(len(row)):
                    rows[i, slot, k] = number_at({"v": row[k]}, "v", f"{what}.{name}[{i}][{k}]")
            ints[N_ROWS] = len(lists)
        if (rows[:, VARIANCES] < 0.0).any():
            raise InvalidState(f"{what}.variances: a bucket's variance must be >= 0")
        width = sum(int(c) << i for i, c in enumerate(ints[COUNTS:]))
        if width > COUNT_LIMIT:
            raise InvalidState(f"{what}: the buckets hold {width} values, more than 2**53")
        ints[TICK] = tick
        ints[DETECTED] = int(doc["drift_detected"])
        floats[TOTAL], floats[VARIANCE], floats[WIDTH] = total, variance, width
        self.rows_, self.ints_, self.floats_ = rows, ints, floats
