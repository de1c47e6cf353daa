"""ALMA_p, the approximate large margin algorithm (Gentile 2001; p-norm link of Gentile 2003).

Range: w lies in the unit q-ball, so |w.x| <= ||x||_p <= 2**13 * VALUE_LIMIT for values
within VALUE_LIMIT. A correction moves phi by at most C / c per coordinate, and
|phi_i| <= 1/c before it, with c^p >= 1e-100 (c is folded into phi below that): so
|phi_i|^p <= (1 + C)^p * 1e100 and, with C <= 100 and p <= 64, S = sum |phi_i|^p stays
below 2**26 * 101**64 * 1e100 < 1e237. After a correction S is at least
``kernel.S_FLOOR`` unless theta is 0 (``kernel.lift``), so the scale c / S^((p-2)/p) stays
below 1e250. gamma_k = B sqrt(p-1)/sqrt(k) needs B (or 1/alma_alpha) within 1e100.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from models.core.forms import BinaryLearner
from models.core.hypothesis import Label
from models.core.learner import Learner
from models.core.params import MAX_SIZE, Constraint, Integer, InvalidParameter, Labels, Real
from models.core.state import InvalidState
from models.kernels import alma as kernel
from models.kernels import families as fam

__all__ = ["ALMA", "inverse_link", "link"]


#: The largest margin scale B (see the module notes).
_B_MAX = 1e100


def _p_link(v: np.ndarray, r: float) -> np.ndarray:
    """g_i(v) = sign(v_i)|v_i|^(r-1) / ||v||_r^(r-2), with g(0) = 0 (scaled against overflow)."""
    v = np.array(v, dtype=np.float64)
    if r == 2.0:  # the identity
        return v
    top = float(np.abs(v).max(initial=0.0))
    if top == 0.0:
        return np.zeros_like(v)
    u = np.abs(v) / top  # g is positively homogeneous of degree 1
    norm = float(np.sum(u**r)) ** (1.0 / r)
    return top * np.sign(v) * u ** (r - 1.0) / norm ** (r - 2.0)


def link(w: np.ndarray, q: float) -> np.ndarray:
    """The link f = grad(||w||_q^2 / 2): primal weights w to dual theta."""
    return _p_link(w, q)


def inverse_link(theta: np.ndarray, p: float) -> np.ndarray:
    """The inverse link f^{-1} (p = q/(q-1)): dual theta to primal weights w."""
    return _p_link(theta, p)


# Dual state: theta = c * phi, S = sum |phi_i|^p, k the correction counter, and the number
# of times c was folded into phi; sc = [c, S, k, folds].


class ALMA(BinaryLearner):
    """ALMA_p: approximate maximal-margin p-norm classification (Gentile 2001).

    Predict the first label (+1) iff w.x >= 0. With x̂ = x/||x||_p, the learner corrects
    itself whenever y w.x̂ <= (1 - alma_alpha) gamma_k, not only on mistakes, where
    gamma_k = B sqrt(p-1)/sqrt(k) and k counts corrections from 1. A correction moves the
    dual vector theta = f(w) by eta_k y x̂ with eta_k = C/(sqrt(p-1) sqrt(k)) and projects it
    onto the unit p-ball; w = f^{-1}(theta) then lies in the unit q-ball (1/p + 1/q = 1).
    p = 2 is additive and Perceptron-like; larger p is increasingly Winnow-like.

    The learner stores theta = c * phi with a global scale c and keeps S = sum |phi_i|^p
    up to date, so a trial costs O(non-zeros); S is recomputed exactly every 4096
    corrections, c is folded into phi before it underflows, and phi is multiplied up (by
    a power of 2, c divided by it) when S gets too small for the scale to be represented.

    Unlike River's ``ALMAClassifier`` this uses the link function f (River's is only right
    for p = 2), normalises x to x̂, projects the whole vector rather than the active
    coordinates, and updates on ``<=`` as in the paper, not ``<``.

    Parameters
    ----------
    n_features
        Number of attributes (add a constant attribute for a learnt threshold).
    p
        The instance norm, in [2, 64] (Mesterharm & Hsu use 2 to 9; beyond 64, |phi_i|^p
        leaves the range of a float).
    alma_alpha
        Degree of approximation to the maximal margin, in (0, 1]; at least 1e-100 when
        ``B`` is None.
    B
        Margin scale, in (0, 1e100]; None means 1/alma_alpha.
    C
        Learning-rate scale, in (0, 100].
    labels
        The two labels; the first is +1.

    References
    ----------
    C. Gentile, "A new approximate maximal margin classification algorithm", JMLR 2
    (2001) 213-242. C. Gentile, "The robustness of the p-norm algorithms", Machine
    Learning 53 (2003) 265-299 (the link function).

    Examples
    --------
    A zero margin is a margin violation, so ALMA learns from a correct prediction:

    >>> alma = ALMA(n_features=2)
    >>> alma.learn({0: 3.0}, 1)
    Outcome(mistake=False, updated=True)
    >>> np.round(alma.weights(), 6).tolist()
    [1.0, 0.0]
    """

    kind = "alma"
    convertible = True
    margin_based = True
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "n_features": Integer(1, MAX_SIZE),
        "p": Real(2.0, 64.0),
        "alma_alpha": Real(0.0, 1.0, low_open=True),
        "B": Real(0.0, _B_MAX, low_open=True, optional=True),
        "C": Real(0.0, 100.0, low_open=True),
        "labels": Labels(exactly=2),
    }
    _state_arrays: ClassVar[dict[str, str]] = {"phi_": "float64", "scalars_": "float64"}
    #: recompute S exactly after every this many corrections.
    _recompute_every: ClassVar[int] = 4096
    #: fold c into phi when c**p falls below this, so S ~ c**-p stays far from overflow.
    _fold_below: ClassVar[float] = 1e-100

    def __init__(
        self,
        n_features: int,
        p: float = 2.0,
        alma_alpha: float = 0.9,
        B: float | None = None,
        C: float = math.sqrt(2),
        labels: Sequence[Label] = (1, -1),
    ) -> None:
        self.n_features = n_features
        self.p = p
        self.alma_alpha = alma_alpha
        self.B = B
        self.C = C
        self.labels = labels  # type: ignore[assignment]
        self._initialise()

    def _check_params(self) -> None:
        self._p = float(self.p)
        self._b = float(self.B) if self.B is not None else 1.0 / float(self.alma_alpha)
        if self._b > _B_MAX:
            raise InvalidParameter(
                "alma_alpha",
                self.alma_alpha,
                f">= {1 / _B_MAX:g} when B is null (B = 1/alma_alpha)",
            )

    def _reset_state(self) -> None:
        self.dual_ = np.zeros((2, self.n_features))
        self.scalars_ = np.array([1.0, 0.0, 1.0, 0.0])

    @property
    def phi_(self) -> np.ndarray:
        """The dual direction phi (theta = c * phi); a view of ``dual_[0]``."""
        return self.dual_[0]

    @phi_.setter
    def phi_(self, phi: np.ndarray) -> None:
        # dual_[1] caches u_i = sign(phi_i)|phi_i|^(p-1), so a weight costs no power.
        dual = np.zeros((2, phi.shape[0]))
        dual[0] = phi
        kernel.powers(dual[0], self._p, dual[1])
        self.dual_ = dual

    def _array_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"phi_": (self.n_features,), "scalars_": (4,)}

    def _take(self, old: Learner, at: np.ndarray) -> None:
        """A new attribute starts at 0, as every coordinate of phi does; it adds nothing
        to S or to an instance's norm."""
        assert isinstance(old, ALMA)
        self.dual_[:, at] = old.dual_
        self.scalars_[...] = old.scalars_

    def silent_rows(self) -> np.ndarray:
        return np.zeros(1)

    def _check_state(self) -> None:
        c, s, k, folds = (float(v) for v in self.scalars_)
        if not (folds >= 0 and folds == math.floor(folds)):
            raise InvalidState(f"alma: fold counter must be an integer >= 0, got {folds!r}")
        if not 0.0 < c <= 1.0:
            raise InvalidState(f"alma: scale c must be in (0, 1], got {c!r}")
        if not (1.0 <= k < 2.0**53 and k == math.floor(k)):
            raise InvalidState(f"alma: correction counter k must be an integer >= 1, got {k!r}")
        exact = float(kernel.exact_s(self.phi_, self._p))
        if not (math.isfinite(exact) and s >= 0.0 and abs(s - exact) <= 1e-6 * max(s, exact)):
            raise InvalidState(f"alma: S = {s!r} does not match sum |phi_i|^p = {exact!r}")
        if c * s ** (1.0 / self._p) > 1.0 + 1e-9:
            raise InvalidState("alma: theta lies outside the unit p-ball")

    @property
    def k_(self) -> int:
        """The correction counter k (1 before the first correction)."""
        return int(self.scalars_[2])

    @property
    def gamma_(self) -> float:
        """The current margin scale gamma_k = B sqrt(p-1)/sqrt(k)."""
        return self._b * math.sqrt(self._p - 1.0) / math.sqrt(self.scalars_[2])

    def _margin(self, idx: np.ndarray, val: np.ndarray) -> float:
        return float(kernel.margin(self.dual_[1], self.scalars_, self._p, idx, val))

    def _fit(self, idx: np.ndarray, val: np.ndarray, y: int, force: bool) -> tuple[int, bool]:
        pred, updated = kernel.fit(
            self.dual_[0],
            self.dual_[1],
            self.scalars_,
            self._p,
            float(self.alma_alpha),
            self._b,
            float(self.C),
            float(self._recompute_every),
            float(self._fold_below),
            idx,
            val,
            y,
            force,
        )
        return int(pred), bool(updated)

    def linear_rows(self, idx: np.ndarray | None = None) -> np.ndarray:
        u = self.dual_[1]
        return (u if idx is None else u[idx])[None, :]

    def linear_coef(self) -> np.ndarray:
        return np.ones(1)

    def linear_scale(self) -> float:
        return float(kernel.norm_scale(self.scalars_, self._p))

    def linear_epoch(self) -> int:
        return int(self.scalars_[3])

    def rescales(self) -> bool:
        return True

    def learn_prefix(self, xs: Any, ys: Sequence[Label]) -> tuple[np.ndarray, np.ndarray, int]:
        """Learn a run of trials in one compiled loop, with the results and the state of
        one by one: (mistakes, updates, trials applied: all, as ALMA refuses no update).

        ``xs`` is an :class:`~models.core.instance.AttributeBatch` or a sequence of
        instances.
        """
        return self._compiled_prefix(xs, ys)

    def kernel_state(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        knobs = (float(self._recompute_every), float(self._fold_below))
        if getattr(self, "_prm_knobs", None) != knobs:  # tests may turn the knobs
            self._prm = fam.pack(
                {
                    fam.ALMA_P: self._p,
                    fam.ALMA_ALPHA: self.alma_alpha,
                    fam.ALMA_B: self._b,
                    fam.ALMA_C: self.C,
                    fam.ALMA_RECOMPUTE_EVERY: knobs[0],
                    fam.ALMA_FOLD_BELOW: knobs[1],
                }
            )
            self._prm_knobs = knobs
        return fam.ALMA, self.dual_, self.scalars_, self._prm

    def weights_at(self, idx: np.ndarray) -> np.ndarray:
        return np.asarray(
            kernel.primal(self.dual_[1], self.scalars_, self._p, np.asarray(idx, dtype=np.int64))
        )

    def weights(self) -> np.ndarray:
        return self.weights_at(np.arange(self.n_features))
