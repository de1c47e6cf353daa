"""Winnow (Littlestone 1988; lecture notes: Winnow, slides 11-27; Savoy, Advanced Linear Models)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from models.core.forms import BinaryLearner
from models.core.hypothesis import Label, LinearHypothesis
from models.core.learner import Learner
from models.core.params import MAX_SIZE, Bool, Integer, InvalidParameter, Labels, Options, Real
from models.core.state import InvalidState
from models.kernels import families as fam
from models.kernels import winnow as kernel
from models.kernels.common import dot
from models.learners.weighted_majority import tracking_off

__all__ = ["Winnow"]


_NO_SCALARS = np.zeros(0)


class Winnow(BinaryLearner):
    """Littlestone's Winnow: positive weights, multiplicative updates on mistakes.

    Predict the first label (+1) iff w.x >= theta (> theta when ``strict``). On a false
    negative every active weight is promoted, w_i *= alpha^{x_i}; on a false positive it is
    demoted, w_i *= beta^{x_i} (beta = 1/alpha by default), or set to 0 with
    ``demotion="eliminate"`` (Winnow1).

    With a thick threshold (``theta_minus < theta_plus``, the "two boundaries" of Savoy's
    Advanced Linear Models) a score inside the band [theta_minus, theta_plus] counts as a
    mistake and updates toward the true label. The lecture gives the band no prediction;
    here it predicts +1 iff the score is at least its midpoint (see docs/readings.rst).

    ``weight_floor`` (0, off, by default) tracks a target that changes (Auer & Warmuth 1998,
    "Tracking the best disjunction"; Mesterharm 2003, "Tracking linear-threshold concepts
    with Winnow"): a demotion, multiplicative or eliminating, never takes a weight below the
    floor (a weight already below stays), so an attribute that becomes relevant needs only
    about log_alpha(theta / floor) promotions to count again; O(active) per trial, bound in
    docs/tracking.rst.

    Parameters
    ----------
    n_features
        Number of attributes.
    alpha
        Promotion factor, > 1.
    theta
        Threshold; None means n_features / 2.
    beta
        Demotion factor in (0, 1); None means 1/alpha.
    strict
        Use ``>`` instead of ``>=``.
    demotion
        ``"multiply"`` (Winnow2) or ``"eliminate"`` (Winnow1).
    theta_minus, theta_plus
        Band edges for a thick threshold; each defaults to ``theta``.
    init
        Initial weight, > 0.
    labels
        The two labels; the first is +1.
    weight_floor
        The least weight a demotion leaves, in [0, 1e100] (0: none).

    Examples
    --------
    >>> w = Winnow(n_features=4, alpha=2.0, theta=2.0)
    >>> w.learn([1, 0, 0, 0], 1)
    Outcome(mistake=True, updated=True)
    >>> w.weights().tolist()
    [2.0, 1.0, 1.0, 1.0]
    """

    kind = "winnow"
    value_range = (0.0, 1.0)
    _parameter_constraints = {
        "n_features": Integer(1, MAX_SIZE),
        # A promoted weight had w_i x_i <= theta_plus, so a promotion leaves it below
        # theta_plus * alpha, or adds less than 2 theta_plus ln(alpha): within these
        # bounds every weight stays below 1e201 over 2**64 updates, every score below 1e209.
        "alpha": Real(1.0, 1e100, low_open=True),
        "theta": Real(0.0, 1e100, low_open=True, optional=True),
        "beta": Real(0.0, 1.0, low_open=True, high_open=True, optional=True),
        "strict": Bool(),
        "demotion": Options(("multiply", "eliminate")),
        "theta_minus": Real(-1e100, 1e100, optional=True),
        "theta_plus": Real(-1e100, 1e100, optional=True),
        "init": Real(0.0, 1e100, low_open=True),
        "labels": Labels(exactly=2),
        "weight_floor": Real(0.0, 1e100),
    }
    _state_arrays = {"w_": "float64"}

    def __init__(
        self,
        n_features: int,
        alpha: float = 2.0,
        theta: float | None = None,
        beta: float | None = None,
        strict: bool = False,
        demotion: str = "multiply",
        theta_minus: float | None = None,
        theta_plus: float | None = None,
        init: float = 1.0,
        labels: Sequence[Label] = (1, -1),
        weight_floor: float = 0.0,
    ) -> None:
        self.n_features = n_features
        self.alpha = alpha
        self.theta = theta
        self.beta = beta
        self.strict = strict
        self.demotion = demotion
        self.theta_minus = theta_minus
        self.theta_plus = theta_plus
        self.init = init
        self.labels = labels  # type: ignore[assignment]
        self.weight_floor = weight_floor
        self._initialise()

    def spec_params(self) -> dict[str, Any]:
        return tracking_off(self.get_params())

    def _check_params(self) -> None:
        theta = float(self.theta) if self.theta is not None else self.n_features / 2
        self._lo = float(self.theta_minus) if self.theta_minus is not None else theta
        self._hi = float(self.theta_plus) if self.theta_plus is not None else theta
        if self._lo > self._hi:
            raise InvalidParameter(
                "theta_minus", self.theta_minus, f"a number <= theta_plus ({self._hi:g})"
            )
        self._la = float(np.log(self.alpha))
        self._lb = float(np.log(self.beta)) if self.beta is not None else -self._la
        self._eliminate = self.demotion == "eliminate"
        self._prm = fam.pack(
            {
                fam.WINNOW_LOW: self._lo,
                fam.WINNOW_HIGH: self._hi,
                fam.WINNOW_STRICT: self.strict,
                fam.WINNOW_PROMOTE: self._la,
                fam.WINNOW_DEMOTE: self._lb,
                fam.WINNOW_ELIMINATE: self._eliminate,
                fam.WINNOW_FLOOR: self.weight_floor,
            }
        )

    def _reset_state(self) -> None:
        self.w_ = np.full(self.n_features, float(self.init))

    def _array_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"w_": (self.n_features,)}

    def _take(self, old: Learner, at: np.ndarray) -> None:
        """A new attribute starts at ``init``: Winnow never moves an inactive weight."""
        assert isinstance(old, Winnow)
        self.w_[at] = old.w_

    def silent_rows(self) -> np.ndarray:
        return np.array([float(self.init)])

    def _check_state(self) -> None:
        if (self.w_ < 0).any():
            raise InvalidState("winnow weights must be non-negative")

    @property
    def effective_threshold(self) -> float:
        return 0.5 * (self._lo + self._hi)

    def _margin(self, idx: np.ndarray, val: np.ndarray) -> float:
        return float(dot(self.w_, idx, val)) - self.effective_threshold

    def _sign(self, m: float) -> int:
        s = m + self.effective_threshold
        return int(kernel.predict(s, self._lo, self._hi, self.strict))

    def _fit(self, idx: np.ndarray, val: np.ndarray, y: int, force: bool) -> tuple[int, bool]:
        return kernel.fit(
            self.w_,
            self._lo,
            self._hi,
            self.strict,
            self._la,
            self._lb,
            self._eliminate,
            self._prm[fam.WINNOW_FLOOR],
            idx,
            val,
            y,
            force,
        )

    def snapshot(self) -> LinearHypothesis:
        # Inside a thick band the prediction is by the midpoint, never strict.
        strict = self.strict and self._lo == self._hi
        return LinearHypothesis(
            self.weights(), self.effective_threshold, self.labels, strict, self._check
        )

    def linear_rows(self, idx: np.ndarray | None = None) -> np.ndarray:
        return self.w_[None, :] if idx is None else self.w_[None, idx]

    def linear_coef(self) -> np.ndarray:
        return np.ones(1)

    def learn_prefix(self, xs: Any, ys: Sequence[Label]) -> tuple[np.ndarray, np.ndarray, int]:
        """Learn a run of trials in one compiled loop, with the results and the state of
        one by one: (mistakes, updates, trials applied: all, as Winnow refuses no update).

        ``xs`` is an :class:`~models.core.instance.AttributeBatch` or a sequence of
        instances.
        """
        return self._compiled_prefix(xs, ys)

    def kernel_state(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        return fam.WINNOW, self.w_[None, :], _NO_SCALARS, self._prm

    def weights_at(self, idx: np.ndarray) -> np.ndarray:
        return self.w_[idx]

    def weights(self) -> np.ndarray:
        return self.w_.copy()
