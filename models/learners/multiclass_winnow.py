"""Multi-class Winnow with (1 + alpha x) updates (Savoy, Advanced Linear Models).

Refusals: checked first. An update that would push a weight to ``kernel.CEILING`` (1e280)
or past it is refused before any weight moves (:class:`models.core.learner.UpdateRefused`);
initial weights are below it, so every weight stays finite, and so does every score.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from models.core.forms import ExpertRunLearner
from models.core.hypothesis import Label
from models.core.instance import ExpertBatch, Experts
from models.core.learner import CannotGrow, Learner, UpdateRefused
from models.core.params import MAX_SIZE, Integer, InvalidParameter, Labels, Real, RealArray
from models.core.state import InvalidState
from models.kernels import families as fam
from models.kernels import multiclass_winnow as kernel
from models.kernels.common import linear_max_scores

__all__ = ["MulticlassWinnow"]


class MulticlassWinnow(ExpertRunLearner):
    """Multi-class Winnow: one positive weight vector per class, (1 + alpha x) updates.

    Over attributes seen as sub-experts (Mesterharm 1999, §4.3: sub-expert (i, c), numbered
    i*k + c, votes x_i for class c) this is the lecture's linear machine: on a mistake with
    true class t and predicted p, W^t_i *= (1 + alpha x_i) and W^p_i /= (1 + alpha x_i).
    For general sub-experts the factor is (1 + alpha |z_i|)^{sign z_i} with z = x^t - x^p.
    No normalisation.

    Parameters
    ----------
    n_experts
        Number of sub-experts (k per attribute for a linear machine).
    alpha
        Learning constant, > 0.
    init
        Initial weight of every sub-expert, unless ``init_weights`` is given; > 0 and
        below 1e280.
    init_weights
        Optional list of n_experts non-negative initial weights below 1e280 (the
        lecture's example #8 starts its bias weights at 0, 1, 2).
    labels
        The class labels, in class order.
    """

    kind = "multiclass-winnow"
    value_range = (0.0, 1.0)
    _parameter_constraints = {
        "n_experts": Integer(1, MAX_SIZE),
        "alpha": Real(0.0, low_open=True),
        "init": Real(0.0, kernel.CEILING, low_open=True, high_open=True),
        "init_weights": RealArray(low=0.0, high=kernel.CEILING),
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
        self._init = None if self.init_weights is None else [float(v) for v in self.init_weights]
        self._prm = fam.pack({fam.MULTICLASS_WINNOW_ALPHA: self.alpha})
        if self._init is not None and len(self._init) != self.n_experts:
            raise InvalidParameter(
                "init_weights",
                f"<{len(self._init)} values>",
                f"a list of n_experts={self.n_experts} values",
            )

    def _reset_state(self) -> None:
        if self._init is None:
            self.w_ = np.full(self.n_experts, float(self.init))
        else:
            self.w_ = np.array(self._init, dtype=np.float64)

    def _array_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"w_": (self.n_experts,)}

    def _can_grow(self) -> None:
        if self.init_weights is not None:
            raise CannotGrow("multiclass-winnow with init_weights: they name every sub-expert")

    def _take(self, old: Learner, at: np.ndarray) -> None:
        """A new sub-expert starts at ``init``: an update never moves an inactive weight."""
        assert isinstance(old, MulticlassWinnow)
        self.w_[at] = old.w_

    def silent_rows(self) -> np.ndarray:
        return np.array([float(self.init)])

    def _check_state(self) -> None:
        if (self.w_ < 0).any():
            raise InvalidState("multiclass-winnow weights must be non-negative")

    def _scores(self, x: Experts) -> np.ndarray:
        return np.asarray(linear_max_scores(self.w_, x.expert, x.cls, x.value, self.n_classes))

    def _learn(self, x: Experts, c: int) -> tuple[int, bool]:
        pred, status = kernel.learn(
            self.w_, float(self.alpha), x.expert, x.cls, x.value, self.n_classes, c
        )
        if status == 2:
            raise UpdateRefused(
                "multiclass-winnow refused an update that would push a weight past "
                f"{kernel.CEILING:g}: use a smaller alpha",
                pred,
            )
        return pred, status == 1

    def _learn_run(
        self, b: ExpertBatch, ys: np.ndarray, predicted: np.ndarray, updates: np.ndarray
    ) -> int:
        return int(
            kernel.learn_batch(
                self.w_, float(self.alpha), b.indptr, b.expert, b.cls, b.value,
                self.n_classes, ys, predicted, updates,
            )
        )  # fmt: skip

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
        return fam.MULTICLASS_WINNOW, self.w_[None, :], np.zeros(0), self._prm

    def weights(self) -> np.ndarray:
        return self.w_.copy()
