"""Balanced Winnow (Mesterharm & Hsu, Fig. 1; the lecture notes Multiplicative Updates & the
Winnow Algorithm, slides 44-45, and Savoy's Advanced Linear Models).

Refusals: checked first. An update that would push a weight past 2**900 (with a threshold,
or even after a shift at threshold 0) is refused before any weight moves, in ``learn`` and
in the batch paths alike (:class:`models.core.learner.UpdateRefused`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from models.core.forms import BinaryLearner, classes_of
from models.core.hypothesis import Label
from models.core.instance import Attributes, InvalidInstance
from models.core.learner import Learner, UpdateRefused
from models.core.params import MAX_SIZE, Bool, Integer, Labels, Real
from models.core.state import InvalidState
from models.kernels import balanced as kernel
from models.kernels import families as fam
from models.learners.weighted_majority import tracking_off

__all__ = ["BalancedWinnow"]


# Weights are one (n, 2) array, w[i] = (w+_i, w-_i), so both halves of a weight share a
# cache line; ``prm`` packs (theta, ln alpha, ln beta, strict, update_on_zero_margin).


_SAFE_LOG2 = 400.0


_OVERFLOW = (
    "balanced-winnow refused an update that would push a weight past 2**900: use a smaller alpha"
)


class BalancedWinnow(BinaryLearner):
    """Balanced Winnow: positive and negative weights, multiplicative updates.

    Predict the first label (+1) iff (w+ - w-).x >= theta (> theta when ``strict``). On an
    update for label y, every active weight moves: w+_i *= a^{x_i}, w-_i *= b^{x_i} with
    (a, b) = (alpha, beta) for y = +1 and (beta, alpha) for y = -1; ``beta`` defaults to
    1/alpha. The defaults are Mesterharm & Hsu's Fig. 1 version (update also on a zero
    margin); the Multiplicative Updates slides' version is ``theta=n``; Advanced Linear
    Models' is ``init_pos=theta/2, init_neg=theta/4, strict=True``.

    ``weight_floor`` (0, off, by default) tracks a target that changes, as for Winnow (Auer
    & Warmuth 1998; Mesterharm 2003): a demotion never takes w+_i or w-_i below the floor
    (a weight already below stays); a shift divides the floor with every weight, so it
    changes no prediction. O(active) per trial; see docs/tracking.rst.

    Parameters
    ----------
    n_features
        Number of attributes (add a constant attribute for a learnt threshold).
    alpha
        Promotion factor, > 1.
    theta
        Threshold.
    init_pos, init_neg
        Initial weights.
    strict
        Use ``>`` instead of ``>=`` against the threshold.
    update_on_zero_margin
        Also update when the margin is exactly 0 (Mesterharm & Hsu, Fig. 1: y * margin <= 0).
    beta
        Demotion factor in (0, 1); None means 1/alpha.
    labels
        The two labels; the first is +1.
    weight_floor
        The least value a demotion leaves in w+ or w-, in [0, 2**900) (0: none).

    Examples
    --------
    >>> bw = BalancedWinnow(n_features=3, alpha=2.0)
    >>> bw.learn({0: 1.0, 2: 1.0}, -1)
    Outcome(mistake=True, updated=True)
    >>> bw.weights().tolist()
    [-1.5, 0.0, -1.5]
    """

    kind = "balanced-winnow"
    convertible = True
    value_range = (0.0, 1.0)
    _parameter_constraints = {
        "n_features": Integer(1, MAX_SIZE),
        "alpha": Real(1.0, low_open=True),
        "theta": Real(-1e100, 1e100),
        "init_pos": Real(0.0, kernel.CEILING, low_open=True, high_open=True),
        "init_neg": Real(0.0, kernel.CEILING, low_open=True, high_open=True),
        "strict": Bool(),
        "update_on_zero_margin": Bool(),
        "beta": Real(0.0, 1.0, low_open=True, high_open=True, optional=True),
        "labels": Labels(exactly=2),
        "weight_floor": Real(0.0, kernel.CEILING, high_open=True),
    }
    _state_arrays = {"w_": "float64", "scalars_": "float64"}

    def __init__(
        self,
        n_features: int,
        alpha: float = 1.1,
        theta: float = 0.0,
        init_pos: float = 1.0,
        init_neg: float = 1.0,
        strict: bool = False,
        update_on_zero_margin: bool = True,
        beta: float | None = None,
        labels: Sequence[Label] = (1, -1),
        weight_floor: float = 0.0,
    ) -> None:
        self.n_features = n_features
        self.alpha = alpha
        self.theta = theta
        self.init_pos = init_pos
        self.init_neg = init_neg
        self.strict = strict
        self.update_on_zero_margin = update_on_zero_margin
        self.beta = beta
        self.labels = labels  # type: ignore[assignment]
        self.weight_floor = weight_floor
        self._initialise()

    def spec_params(self) -> dict[str, Any]:
        return tracking_off(self.get_params())

    def _check_params(self) -> None:
        la = float(np.log(self.alpha))
        lb = float(np.log(self.beta)) if self.beta is not None else -la
        self._theta = float(self.theta)
        self._prm = fam.pack(
            {
                fam.BALANCED_THETA: self._theta,
                fam.BALANCED_PROMOTE: la,
                fam.BALANCED_DEMOTE: lb,
                fam.BALANCED_STRICT: self.strict,
                fam.BALANCED_ON_ZERO: self.update_on_zero_margin,
                fam.BALANCED_FLOOR: self.weight_floor,
            }
        )

    def _reset_state(self) -> None:
        self.w_ = np.empty((self.n_features, 2))
        self.scalars_ = np.zeros(2)
        self.w_[:, 0] = self.init_pos
        self.w_[:, 1] = self.init_neg

    @property
    def w_pos_(self) -> np.ndarray:
        """The positive weights w+ (a view)."""
        return self.w_[:, 0]

    @property
    def w_neg_(self) -> np.ndarray:
        """The negative weights w- (a view)."""
        return self.w_[:, 1]

    def _array_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"w_": (self.n_features, 2), "scalars_": (2,)}

    def _take(self, old: Learner, at: np.ndarray) -> None:
        """A new attribute starts at (init_pos, init_neg), divided as every weight was by
        the shifts so far, one at a time as the shifts did."""
        assert isinstance(old, BalancedWinnow)
        for _ in range(int(old.scalars_[1])):
            self.w_ *= 2.0**-kernel.SHIFT_BITS
        self.w_[at] = old.w_
        self.scalars_[...] = old.scalars_

    def silent_rows(self) -> np.ndarray:
        rows = np.array([self.init_pos, self.init_neg], dtype=np.float64)
        for _ in range(int(self.scalars_[1])):
            rows *= 2.0**-kernel.SHIFT_BITS
        return rows

    def _check_state(self) -> None:
        if not ((self.w_ >= 0).all() and (self.w_ < 2.0**1000).all()):
            raise InvalidState("balanced-winnow weights must be in [0, 2**1000)")
        shift, count = (float(v) for v in self.scalars_)
        if not (shift == kernel.SHIFT_BITS * count and count >= 0 and count == np.floor(count)):
            raise InvalidState("balanced-winnow: the weight shift does not match its count")
        if shift and self._theta != 0.0:
            raise InvalidState("balanced-winnow: weights shifted with a non-zero threshold")

    @property
    def effective_threshold(self) -> float:
        return self._theta

    def _margin(self, idx: np.ndarray, val: np.ndarray) -> float:
        return float(kernel.margin(self.w_, self._prm, idx, val))

    def _predict(self, x: Attributes) -> int:
        return 0 if kernel.sign(self.w_, self._prm, x.indices, x.values) > 0 else 1

    def _fit(self, idx: np.ndarray, val: np.ndarray, y: int, force: bool) -> tuple[int, bool]:
        pred, status = kernel.fit(self.w_, self.scalars_, self._prm, idx, val, y, force)
        if status == 2:
            raise UpdateRefused(_OVERFLOW, 0 if pred > 0 else 1)
        return pred, status == 1

    # A refused update changes nothing (the kernel checks every weight first). With a
    # threshold the weights never shift, so a checkpoint keeps the rows a trial may move;
    # at threshold 0 a shift moves every weight, so it keeps them all.

    def can_refuse(self) -> bool:
        """With threshold 0, only a factor of 2**400 or more can outgrow one shift: the
        weights are below 2**1024, so a shifted one is below 2**424 and, moved, below 2**900.
        """
        top = max(float(self.alpha), 1.0 / (self.beta or 1.0 / float(self.alpha)))
        return self._theta != 0.0 or np.log2(top) >= _SAFE_LOG2

    def rescales(self) -> bool:
        return self._theta == 0.0

    def _save_at(self, idx: np.ndarray) -> Any:
        if self._theta == 0.0:
            return None, self.w_.copy(), self.scalars_.copy()
        return idx, self.w_[idx], self.scalars_.copy()

    def _restore_at(self, saved: Any) -> None:
        idx, rows, scalars = saved
        if idx is None:
            self.w_[...] = rows
        else:
            self.w_[idx] = rows
        self.scalars_[...] = scalars

    def linear_rows(self, idx: np.ndarray | None = None) -> np.ndarray:
        return self.w_.T if idx is None else self.w_[idx].T

    def linear_coef(self) -> np.ndarray:
        return np.array([1.0, -1.0])

    def linear_shift(self) -> float:
        return float(self.scalars_[0])

    def kernel_state(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        return fam.BALANCED, self.w_, self.scalars_, self._prm

    def weights_at(self, idx: np.ndarray) -> np.ndarray:
        return self.w_[idx, 0] - self.w_[idx, 1]

    def weights(self) -> np.ndarray:
        return self.w_[:, 0] - self.w_[:, 1]

    def learn_many(self, xs: Any, ys: Sequence[Label]) -> tuple[np.ndarray, np.ndarray]:
        """Learn a batch in one compiled loop, with the same results as trial by trial.

        ``xs`` is an :class:`AttributeBatch` or a sequence of instances.
        """
        mistakes, updates, done, refused = self._learn_prefix(xs, ys)
        if done < len(mistakes):
            raise UpdateRefused(
                f"trial {done} of the batch: {_OVERFLOW}; earlier trials applied", refused
            )
        return mistakes, updates

    def learn_prefix(self, xs: Any, ys: Sequence[Label]) -> tuple[np.ndarray, np.ndarray, int]:
        """:meth:`learn_many` up to the first trial whose update would leave float range
        (refused whole, see the class notes): (mistakes, updates, trials applied).

        The trials before the refused one stay applied; the refused one and those after it
        change nothing.
        """
        mistakes, updates, done, _ = self._learn_prefix(xs, ys)
        return mistakes, updates, done

    def _learn_prefix(
        self, xs: Any, ys: Sequence[Label]
    ) -> tuple[np.ndarray, np.ndarray, int, int]:
        """:meth:`learn_prefix` and the class predicted on the refused trial (-1: none)."""
        batch = self.coerce_batch(xs)
        indptr, idx, val = batch.indptr, batch.indices, batch.values
        if len(ys) != len(batch):
            raise InvalidInstance(f"{len(batch)} instances but {len(ys)} labels")
        signs = 1 - 2 * classes_of(self, ys)
        mistakes = np.zeros(signs.size, dtype=bool)
        updates = np.zeros(signs.size, dtype=bool)
        done = kernel.fit_batch(
            self.w_, self.scalars_, self._prm, indptr, idx, val, signs, mistakes, updates
        )
        refused = -1
        if done < signs.size:  # the refused trial's prediction: y's class, flipped if wrong
            refused = int(signs[done] < 0) ^ int(mistakes[done])
            mistakes[done] = False
        n_upd = int(updates[:done].sum())
        self.trials_ += done
        self.mistakes_ += int(mistakes[:done].sum())
        self.updates_ += n_upd
        self.version_ += n_upd
        return mistakes, updates, int(done), refused
