"""The Perceptron (Winnow lecture notes, slides 2 and 5; Freund & Schapire 1999).

Range: a weight moves by at most eta * 2 * VALUE_LIMIT per update (2: a sub-expert
difference), so after 2**64 updates |w_i| <= 2**65 * 1e50 * 1e100 < 1e170, and a score,
at most MAX_SIZE = 2**26 such weights times values within 1e100, stays below 1e278 (an
average of weights, as A-B keeps, no larger). Hence ``eta <= 1e50`` and values within
VALUE_LIMIT; no update can then overflow, so the Perceptron never refuses one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from models.core.forms import BinaryLearner
from models.core.hypothesis import Label
from models.core.learner import Learner
from models.core.params import MAX_SIZE, Integer, Labels, Real
from models.kernels import families as fam
from models.kernels import perceptron as kernel
from models.kernels.common import dot

__all__ = ["Perceptron"]


_NO_SCALARS = np.zeros(0)

#: The largest learning rate (see the module notes).
ETA_MAX = 1e50


class Perceptron(BinaryLearner):
    """Rosenblatt's Perceptron with w = 0 initially.

    Predict the first label (+1) iff w.x >= 0; if y * w.x <= 0, w += eta * y * x. Starting
    from zero, ``eta`` only rescales w, so predictions do not depend on it.

    Parameters
    ----------
    n_features
        Number of attributes (add a constant attribute for a learnt threshold).
    eta
        Learning rate, in (0, 1e50].
    labels
        The two labels; the first is +1.

    Examples
    --------
    >>> p = Perceptron(n_features=2)
    >>> p.learn([1.0, 0.0], -1)
    Outcome(mistake=True, updated=True)
    >>> p.weights().tolist()
    [-1.0, 0.0]
    """

    kind = "perceptron"
    convertible = True
    _parameter_constraints = {
        "n_features": Integer(1, MAX_SIZE),
        "eta": Real(0.0, ETA_MAX, low_open=True),
        "labels": Labels(exactly=2),
    }
    _state_arrays = {"w_": "float64"}

    def __init__(
        self, n_features: int, eta: float = 1.0, labels: Sequence[Label] = (1, -1)
    ) -> None:
        self.n_features = n_features
        self.eta = eta
        self.labels = labels  # type: ignore[assignment]
        self._initialise()

    def _reset_state(self) -> None:
        self.w_ = np.zeros(self.n_features)

    def _array_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"w_": (self.n_features,)}

    def _take(self, old: Learner, at: np.ndarray) -> None:
        """A new attribute starts at 0, as every weight does."""
        assert isinstance(old, Perceptron)
        self.w_[at] = old.w_

    def silent_rows(self) -> np.ndarray:
        return np.zeros(1)

    def _margin(self, idx: np.ndarray, val: np.ndarray) -> float:
        return float(dot(self.w_, idx, val))

    def _fit(self, idx: np.ndarray, val: np.ndarray, y: int, force: bool) -> tuple[int, bool]:
        return kernel.fit(self.w_, float(self.eta), idx, val, y, force)

    def linear_rows(self, idx: np.ndarray | None = None) -> np.ndarray:
        return self.w_[None, :] if idx is None else self.w_[None, idx]

    def linear_coef(self) -> np.ndarray:
        return np.ones(1)

    def _check_params(self) -> None:
        self._prm = fam.pack({fam.PERCEPTRON_ETA: self.eta})

    def learn_prefix(self, xs: Any, ys: Sequence[Label]) -> tuple[np.ndarray, np.ndarray, int]:
        """Learn a run of trials in one compiled loop, with the results and the state of
        one by one: (mistakes, updates, trials applied: all, as the Perceptron refuses no update).

        ``xs`` is an :class:`~models.core.instance.AttributeBatch` or a sequence of
        instances.
        """
        return self._compiled_prefix(xs, ys)

    def kernel_state(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        return fam.PERCEPTRON, self.w_[None, :], _NO_SCALARS, self._prm

    def weights_at(self, idx: np.ndarray) -> np.ndarray:
        return self.w_[idx]

    def weights(self) -> np.ndarray:
        return self.w_.copy()
