"""Multi-class Winnow with (1 + alpha x) updates (ALGORITHMS.md §2.3; S2).

Refusals: checked first. An update that would push a weight past 1e300 is refused before
any weight moves (:class:`models.base.UpdateRefused`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

from models._kernels import argmax_first, linear_max_scores, slice_difference
from models.base import Label, MulticlassLearner, UpdateRefused
from models.instance import Experts
from models.params import MAX_SIZE, Integer, InvalidParameter, Labels, Real, RealArray
from models.state import InvalidState

__all__ = ["MulticlassWinnow"]


@njit(cache=True, nogil=True)
def _learn(w, alpha, expert, cls, value, k, y):  # type: ignore[no-untyped-def]  # pragma: no cover
    s = linear_max_scores(w, expert, cls, value, k)
    pred = argmax_first(s)
    if pred == y:
        return pred, 0
    zi, zv = slice_difference(expert, cls, value, y, pred)
    for j in range(zi.shape[0]):  # refuse, whole, an update that would overflow
        f = 1.0 + alpha * abs(zv[j])
        v = w[zi[j]] * f if zv[j] > 0 else w[zi[j]] / f
        if not v < 1e300:
            return pred, 2
    for j in range(zi.shape[0]):
        f = 1.0 + alpha * abs(zv[j])
        if zv[j] > 0:
            w[zi[j]] *= f
        else:
            w[zi[j]] /= f
    return pred, 1 if zi.shape[0] > 0 else 0


class MulticlassWinnow(MulticlassLearner):
    """Multi-class Winnow: one positive weight vector per class, (1 + alpha x) updates.

    Over attributes seen as sub-experts (ALGORITHMS.md §1.4, sub-expert (i, c) numbered
    i*k + c) this is S2's linear machine: on a mistake with true class t and predicted p,
    W^t_i *= (1 + alpha x_i) and W^p_i /= (1 + alpha x_i). For general sub-experts the
    factor is (1 + alpha |z_i|)^{sign z_i} with z = x^t - x^p. No normalisation.

    Parameters
    ----------
    n_experts
        Number of sub-experts (k per attribute for a linear machine).
    alpha
        Learning constant, > 0.
    init
        Initial weight of every sub-expert, unless ``init_weights`` is given.
    init_weights
        Optional list of n_experts non-negative initial weights (S2's example starts its
        bias weights at 0, 1, 2).
    labels
        The class labels, in class order.
    """

    kind = "multiclass-winnow"
    value_range = (0.0, 1.0)
    _parameter_constraints = {
        "n_experts": Integer(1, MAX_SIZE),
        "alpha": Real(0.0, low_open=True),
        "init": Real(0.0, low_open=True),
        "init_weights": RealArray(low=0.0),
        "labels": Labels(),
    }
    _state_arrays = {"w_": "float64"}

    def __init__(
        self,
        n_experts: int,
        labels: Sequence[Label],
        alpha: float = 2.0,
        init: float = 1.0,
        init_weights: Sequence[float] | None = None,
    ) -> None:
        self.n_experts = n_experts
        self.labels = labels  # type: ignore[assignment]
        self.alpha = alpha
        self.init = init
        self.init_weights = init_weights
        self._initialise()

    def _check_params(self) -> None:
        if self.init_weights is not None:
            self.init_weights = [float(v) for v in self.init_weights]
        if self.init_weights is not None and len(self.init_weights) != self.n_experts:
            raise InvalidParameter(
                "init_weights",
                f"<{len(self.init_weights)} values>",
                f"a list of n_experts={self.n_experts} values",
            )

    def _reset_state(self) -> None:
        if self.init_weights is None:
            self.w_ = np.full(self.n_experts, float(self.init))
        else:
            self.w_ = np.array(self.init_weights, dtype=np.float64)

    def _array_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"w_": (self.n_experts,)}

    def _check_state(self) -> None:
        if (self.w_ < 0).any():
            raise InvalidState("multiclass-winnow weights must be non-negative")

    def _scores(self, x: Experts) -> np.ndarray:
        return np.asarray(linear_max_scores(self.w_, x.expert, x.cls, x.value, self.n_classes))

    def _learn(self, x: Experts, c: int) -> tuple[int, bool]:
        pred, status = _learn(
            self.w_, float(self.alpha), x.expert, x.cls, x.value, self.n_classes, c
        )
        if status == 2:
            raise UpdateRefused(
                "multiclass-winnow refused an update that would push a weight past 1e300: "
                "use a smaller alpha",
                pred,
            )
        return pred, status == 1

    # A refused update changes nothing (the kernel checks every weight first); a trial
    # moves only the weights of the instance's sub-experts, so a checkpoint keeps those.

    def can_refuse(self) -> bool:
        return True

    def _save_at(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return idx, self.w_[idx]

    def _restore_at(self, saved: tuple[np.ndarray, np.ndarray]) -> None:
        idx, rows = saved
        self.w_[idx] = rows

    def linear_rows(self, idx: np.ndarray | None = None) -> np.ndarray:
        return self.w_[None, :] if idx is None else self.w_[None, idx]

    def linear_coef(self) -> np.ndarray:
        return np.ones(1)

    def kernel_state(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        return 11, self.w_[None, :], np.zeros(0), np.array([float(self.alpha)])

    def weights(self) -> np.ndarray:
        return self.w_.copy()
