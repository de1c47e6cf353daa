"""The Page-Hinkley test (Page 1954), as River's ``drift.PageHinkley`` computes it.

References
----------
E. S. Page, "Continuous inspection schemes", Biometrika 41 (1954) 100-115. River's
``river/drift/page_hinkley.py``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from models.core.params import Constraint, Integer, Options, Real
from models.core.state import InvalidState, expect_keys
from models.drift.base import COUNT_LIMIT, DriftDetector, count_at, number_at
from models.kernels.drift import (
    MODES,
    PH_ALPHA,
    PH_DELTA,
    PH_DETECTED,
    PH_MAX_DOWN,
    PH_MEAN,
    PH_MIN_N,
    PH_MIN_UP,
    PH_MODE,
    PH_N,
    PH_SUM_DOWN,
    PH_SUM_UP,
    PH_THRESHOLD,
    ph_clear,
    ph_run,
    ph_step,
)

__all__ = ["PageHinkley"]


class PageHinkley(DriftDetector):
    """The Page-Hinkley test (Page 1954), a CUSUM on the deviations from a running mean,
    as River's ``drift.PageHinkley`` computes it.

    With the mean x̄ of the values so far, ``up = alpha * up + (x - x̄) - delta`` and
    ``down = alpha * down + (x - x̄) + delta``; once ``min_instances`` values are in, a
    rise of ``up`` above its least value (``mode="up"``) or a fall of ``down`` below its
    greatest (``"down"``), or either (``"both"``), by more than ``threshold`` is a drift.
    The update after a drift starts afresh.

    Parameters
    ----------
    min_instances
        Values before the first test, in [1, 2**53].
    delta
        The magnitude of change tolerated per value, a finite number >= 0.
    threshold
        The detection threshold lambda, > 0. The default 50 (River's too), with
        ``delta=0.03`` and ``alpha=1``, keeps a mistake stream of 100,000 trials free of
        false alarms (see the notes of :mod:`models.drift`).
    alpha
        The forgetting factor of the sums, in (0, 1].
    mode
        ``"up"`` (the default; River's is ``"both"``): a rise of the mean, for a mistake
        stream a regression; ``"down"``; or ``"both"``.

    Examples
    --------
    >>> ph = PageHinkley()
    >>> stream = np.r_[np.zeros(1000), np.ones(1000)]
    >>> ph.update_many(stream).tolist()
    [1052]
    """

    kind = "page-hinkley"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "min_instances": Integer(1, COUNT_LIMIT),
        "delta": Real(0.0),
        "threshold": Real(0.0, low_open=True),
        "alpha": Real(0.0, 1.0, low_open=True),
        "mode": Options(MODES),
    }

    def __init__(
        self,
        min_instances: int = 30,
        delta: float = 0.03,
        threshold: float = 50.0,
        alpha: float = 1.0,
        mode: str = "up",
    ) -> None:
        self.min_instances = min_instances
        self.delta = delta
        self.threshold = threshold
        self.alpha = alpha
        self.mode = mode
        self._initialise()

    def reset(self) -> None:
        self.state_ = self._empty()

    def _empty(self) -> np.ndarray:
        """A fresh state, the parameters in their slots."""
        state = np.zeros(PH_DETECTED + 1)
        state[PH_MIN_N], state[PH_DELTA] = self.min_instances, self.delta
        state[PH_THRESHOLD], state[PH_ALPHA] = self.threshold, self.alpha
        state[PH_MODE] = MODES.index(self.mode)
        ph_clear(state)
        return state

    def _step(self, x: float) -> bool:
        return bool(ph_step(x, self.state_))

    def _run(self, xs: np.ndarray, fired: np.ndarray) -> int:
        return int(ph_run(xs, self.state_, fired))

    @property
    def drift_detected(self) -> bool:
        return bool(self.state_[PH_DETECTED])

    def _export(self) -> dict[str, Any]:
        s = self.state_
        return {
            "n": int(s[PH_N]),
            "mean": float(s[PH_MEAN]),
            "sum_increase": float(s[PH_SUM_UP]),
            "sum_decrease": float(s[PH_SUM_DOWN]),
            # infinite (null here) until the first value
            "min_increase": float(s[PH_MIN_UP]) if s[PH_N] else None,
            "max_decrease": float(s[PH_MAX_DOWN]),
            "drift_detected": bool(s[PH_DETECTED]),
        }

    def _import(self, doc: Any) -> None:
        what = "drift.state"
        names = ("mean", "sum_increase", "sum_decrease", "min_increase", "max_decrease")
        doc = expect_keys(doc, what, {"n", "drift_detected", *names})
        n = count_at(doc, "n", what, COUNT_LIMIT)
        if not isinstance(doc["drift_detected"], bool):
            raise InvalidState(f"{what}.drift_detected: expected true or false")
        if n == 0 and doc["min_increase"] is not None:
            raise InvalidState(f"{what}.min_increase: expected null before the first value")
        state = self._empty()
        state[PH_N] = n
        state[PH_DETECTED] = float(doc["drift_detected"])
        for slot, name in zip(range(PH_MEAN, PH_DETECTED), names, strict=True):
            if n == 0 and name == "min_increase":
                state[slot] = math.inf
            else:
                state[slot] = number_at(doc, name, what)
        if n and not (
            state[PH_MIN_UP] <= state[PH_SUM_UP] and state[PH_MAX_DOWN] >= state[PH_SUM_DOWN]
        ):
            raise InvalidState(
                f"{what}: min_increase must be <= sum_increase and max_decrease >= sum_decrease"
            )
        self.state_ = state
