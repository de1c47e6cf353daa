"""Committee: multi-class Winnow over sub-experts (Mesterharm 1999, §3 and Theorem 1)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from models.core.forms import ExpertRunLearner
from models.core.hypothesis import Label, LinearMaxHypothesis
from models.core.instance import ExpertBatch, Experts
from models.core.learner import Learner
from models.core.params import MAX_SIZE, Integer, Labels, Real
from models.core.state import InvalidState
from models.kernels import committee as kernel
from models.kernels import families as fam
from models.kernels.common import (
    argmax_first,
    linear_max_decide_rows,
    linear_max_predict,
    linear_max_scores,
)
from models.learners.weighted_majority import tracking_off

__all__ = ["Committee"]


class Committee(ExpertRunLearner):
    """Committee: weights over sub-experts, multiplicative updates, normalised to sum 1.

    Class j's vote is sum_i w_i x_i^j; the prediction is the first class with the largest
    vote. On a mistake (true y, predicted p) every sub-expert's weight is multiplied by
    alpha^{x_i^y - x_i^p}, then all weights are rescaled to sum 1. Raw weights and their
    running sum are stored, so a trial costs O(active sub-experts); ``scores`` divides by
    the running sum, ``weights`` by the exact one.

    The mistake bound (Mesterharm 1999, Theorem 1) is 2 ln(n) / delta^2 with
    alpha = (1 - delta)^{-1/2}.

    Two options track a best sub-expert that changes (both 0, off, by default; see
    docs/tracking.rst). ``weight_floor`` (gamma; Littlestone & Warmuth 1994, §5, WML): a
    demotion never takes a weight below gamma/n of the total at the start of the trial (a
    weight already below stays), so a trial stays O(active). ``fixed_share`` (alpha_s;
    Herbster & Warmuth 1998): after each update every weight gives the fraction alpha_s of
    itself to a pool shared equally by all n. The weights are read in place by the compiled
    wrappers, so the share is one exact O(n) pass per update (not per trial).

    Parameters
    ----------
    n_experts
        Number of sub-experts.
    alpha
        Update multiplier, > 1.
    labels
        The class labels, in class order.
    weight_floor
        gamma in [0, 1): the relative weight floor (0: none).
    fixed_share
        alpha_s in [0, 1): the fraction each weight shares after an update (0: none).

    Examples
    --------
    >>> c = Committee(n_experts=3, alpha=2.0, labels=["a", "b"])
    >>> x = [[1, 0], [0, 1], [0.5, 0.5]]
    >>> c.learn(x, "b")
    Outcome(mistake=True, updated=True)
    >>> (c.weights() * 7).round(9).tolist()
    [1.0, 4.0, 2.0]
    """

    kind = "committee"
    value_range = (0.0, 1.0)
    _parameter_constraints = {
        "n_experts": Integer(1, MAX_SIZE),
        # R < 1e103 before an update (rescaled into [1e-100, 1e100], drift 1e3): a weight
        # multiplied by at most alpha stays below 1e303, and R / alpha / 2**26 > 0.
        "alpha": Real(1.0, 1e200, low_open=True),
        "labels": Labels(),
        "weight_floor": Real(0.0, 1.0, high_open=True),
        "fixed_share": Real(0.0, 1.0, high_open=True),
    }
    _state_arrays = {"r_": "float64", "scalars_": "float64"}

    def __init__(
        self,
        n_experts: int,
        labels: Sequence[Label],
        alpha: float = 1.2,
        weight_floor: float = 0.0,
        fixed_share: float = 0.0,
    ) -> None:
        self.n_experts = n_experts
        self.labels = labels  # type: ignore[assignment]
        self.alpha = alpha
        self.weight_floor = weight_floor
        self.fixed_share = fixed_share
        self._initialise()

    def spec_params(self) -> dict[str, Any]:
        return tracking_off(self.get_params())

    def _check_params(self) -> None:
        self._la = float(np.log(self.alpha))
        self._k = len(self.labels)
        self._prm = fam.pack(
            {
                fam.COMMITTEE_LOG_ALPHA: self._la,
                fam.COMMITTEE_FLOOR: self.weight_floor,
                fam.COMMITTEE_SHARE: self.fixed_share,
            }
        )

    def _reset_state(self) -> None:
        base = 1.0 / self.n_experts
        self.r_ = np.full(self.n_experts, base)
        # [R, updates since the recount, R at the recount, rescales, the raw weight of a
        # sub-expert no update has moved]
        self.scalars_ = np.array([1.0, 0.0, 1.0, 0.0, base])

    def _array_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"r_": (self.n_experts,), "scalars_": (-1,)}

    def _check_state(self) -> None:
        if not (self.r_ >= 0).all() or not self.r_.sum() > 0:
            raise InvalidState("committee weights must be non-negative with a positive sum")
        total = float(self.r_.sum())
        sc = self.scalars_
        if sc.shape[0] == 4:  # a state kept before the untouched weight was: its best guess
            untouched = 1.0 / self.n_experts if sc[3] == 0 else total / self.n_experts
            self.scalars_ = sc = np.append(sc, untouched)
        if (
            sc.shape[0] != 5
            or not np.isclose(sc[0], total, rtol=1e-6)
            or sc[1] < 0
            or not sc[2] > 0
            or not (sc[3] >= 0 and sc[3] == np.floor(sc[3]))
            or not 0 < sc[4] < np.inf
        ):
            raise InvalidState("committee running sum does not match its weights")

    def _take(self, old: Learner, at: np.ndarray) -> None:
        """A new sub-expert starts at the raw weight of one no update has moved (1/n of
        the first total, divided as every weight was by the rescales), so that it holds
        the share of the total it would hold had it been there from the start."""
        assert isinstance(old, Committee)
        base = float(old.scalars_[4])
        self.r_[:] = base
        self.r_[at] = old.r_
        self.scalars_[...] = old.scalars_
        self.scalars_[0] += base * (self.n_experts - old.n_experts)

    def silent_rows(self) -> np.ndarray:
        return self.scalars_[4:5].copy()

    def _scores(self, x: Experts) -> np.ndarray:
        s = linear_max_scores(self.r_, x.expert, x.cls, x.value, self.n_classes)
        return s / self.scalars_[0]

    def _predict(self, x: Experts) -> int:
        return int(linear_max_predict(self.r_, x.expert, x.cls, x.value, len(self.labels)))

    def _decide(self, x: Experts) -> tuple[int, np.ndarray]:
        s = linear_max_scores(self.r_, x.expert, x.cls, x.value, self.n_classes)
        return int(argmax_first(s)), s / self.scalars_[0]

    def _decide_many(self, xs: list[Experts]) -> list[tuple[int, np.ndarray]]:
        if len(xs) < 2:
            return super()._decide_many(xs)
        ptr = np.zeros(len(xs) + 1, dtype=np.int64)
        np.cumsum([x.expert.shape[0] for x in xs], out=ptr[1:])
        best, s = linear_max_decide_rows(
            self.r_,
            np.concatenate([x.expert for x in xs]),
            np.concatenate([x.cls for x in xs]),
            np.concatenate([x.value for x in xs]),
            ptr,
            self.n_classes,
            self.scalars_[0],
        )
        return list(zip(best.tolist(), s, strict=True))

    def _learn(self, x: Experts, c: int) -> tuple[int, bool]:
        wf, wi = self._scratch(x.expert.shape[0])
        prm = self._prm
        return kernel.learn(
            self.r_, self.scalars_, self._la, prm[fam.COMMITTEE_FLOOR], prm[fam.COMMITTEE_SHARE],
            x.expert, x.cls, x.value, self._k, c, wf, wi,
        )  # fmt: skip

    def _learn_run(
        self, b: ExpertBatch, ys: np.ndarray, predicted: np.ndarray, updates: np.ndarray
    ) -> int:
        wf, wi = self._scratch(int(np.diff(b.indptr).max(initial=0)))
        prm = self._prm
        return int(
            kernel.learn_batch(
                self.r_, self.scalars_, self._la, prm[fam.COMMITTEE_FLOOR],
                prm[fam.COMMITTEE_SHARE], b.indptr, b.expert, b.cls, b.value, self._k,
                ys, predicted, updates, wf, wi,
            )
        )  # fmt: skip

    def linear_rows(self, idx: np.ndarray | None = None) -> np.ndarray:
        return self.r_[None, :] if idx is None else self.r_[None, idx]

    def linear_coef(self) -> np.ndarray:
        return np.ones(1)

    def linear_scale(self) -> float:
        return 1.0 / float(self.scalars_[0])

    def linear_epoch(self) -> int:
        return int(self.scalars_[3])

    def rescales(self) -> bool:
        return True

    def kernel_state(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        return fam.COMMITTEE, self.r_[None, :], self.scalars_, self._prm

    def snapshot(self) -> LinearMaxHypothesis:
        # Keep the raw weights so the snapshot's arg-max is the learner's, ties included.
        return LinearMaxHypothesis(self.r_, self.labels, self._check, 1.0 / float(self.r_.sum()))

    def weights(self) -> np.ndarray:
        """The normalised weights r / sum(r) (an exact sum: this is O(n) anyway)."""
        return self.r_ / self.r_.sum()
