"""The Weighted Majority Algorithm (Littlestone & Warmuth 1994; Mesterharm & Hsu, §IV)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from models.core.forms import ExpertRunLearner
from models.core.hypothesis import Hypothesis, InstanceCheck, Label
from models.core.instance import ExpertBatch, Experts
from models.core.learner import Learner
from models.core.params import MAX_SIZE, Integer, Labels, Options, Real
from models.core.state import InvalidState
from models.kernels import weighted_majority as kernel

__all__ = ["TRACKING", "WeightedMajority", "WeightedMajorityHypothesis", "tracking_off"]

#: The options that track a changing best expert (see docs/tracking.rst); 0 is off.
TRACKING = ("weight_floor", "fixed_share")
#: The largest weight of the Brier score in a sub-expert's loss: its loss stays within
#: [0, 1 + BRIER_LIMIT], and a weight falls by at most beta ** (1 + BRIER_LIMIT) a trial.
BRIER_LIMIT = 16.0


def tracking_off(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` without the tracking options that are off, so that a spec (and a state)
    of a learner that does not track is the one it was before these options existed."""
    return {k: v for k, v in params.items() if k not in TRACKING or v != 0}


class WeightedMajorityHypothesis(Hypothesis):
    """A frozen Weighted Majority: each expert's vote goes to its own top class."""

    def __init__(
        self, weights: np.ndarray, labels: tuple[Label, ...], check: InstanceCheck
    ) -> None:
        self.weights = np.array(weights, dtype=np.float64)
        self.weights.flags.writeable = False
        self.labels = labels
        self.check = check

    def scores(self, x: Any) -> np.ndarray:
        x = self.check(x)
        picks = np.empty((len(x), 2), dtype=np.int64)
        totals, _ = kernel.votes(self.weights, x.expert, x.cls, x.value, len(self.labels), picks)
        return np.asarray(totals)


class WeightedMajority(ExpertRunLearner):
    """Weighted Majority over experts, each predicting one label.

    Each sub-expert predicts its top-voted class (ties to the smallest); sub-experts with no
    vote abstain. Class j gets the total weight of the experts predicting j, and the first
    class with the largest total is predicted. Experts that predicted wrongly have their
    weight multiplied by ``beta``, on every trial (``update="every_trial"``, Littlestone &
    Warmuth's WM) or only when the master prediction was wrong (``"on_mistake"``). If the
    best expert makes m mistakes among v experts, M <= (ln v + m ln(1/beta)) / ln(2/(1+beta)).

    ``brier`` (0, off, by default) adds to each sub-expert's loss the weight ``brier``
    times half the Brier score of its votes scaled to sum to one, sum_c (p_c - [c = y])^2
    / 2 in [0, 1]: on an update every voting sub-expert's weight is multiplied by
    beta ** (wrong + brier * that), so sub-experts with the same mistakes are ordered by
    the probability they gave the true labels (Brier 1950; a proper scoring rule). The
    bound holds with m + brier * B in place of m, B the best sub-expert's summed half
    Brier scores (docs/fusion.rst).

    Two options track a best expert that changes (both 0, off, by default; bounds in
    docs/tracking.rst). ``weight_floor`` is gamma of Littlestone & Warmuth's WML (1994, §5):
    a wrong expert's weight is multiplied by beta but not taken below gamma/n of the total
    at the start of the trial (a weight already below stays), O(active) per trial.
    ``fixed_share`` is alpha_s of Herbster & Warmuth's fixed share ("Tracking the best
    expert", 1998): after each trial that moved a weight, every weight gives the fraction
    alpha_s of itself to a pool shared equally by all n experts,
    w_i <- (1 - alpha_s) w_i + alpha_s W / n; one exact O(n) pass per update.

    Parameters
    ----------
    n_experts
        Number of experts.
    beta
        Penalty factor in [0, 1).
    update
        ``"every_trial"`` or ``"on_mistake"``.
    labels
        The class labels, in class order.
    weight_floor
        gamma in [0, 1): the relative weight floor (0: none).
    fixed_share
        alpha_s in [0, 1): the fraction each weight shares after an update (0: none).
    brier
        The weight of the half Brier score in a sub-expert's loss, in [0, 16] (0: none,
        a sub-expert's loss is its 0/1 loss).

    Examples
    --------
    >>> wm = WeightedMajority(n_experts=3, labels=[0, 1], beta=0.5)
    >>> x = Experts.one_hot([0, 1, 1])
    >>> wm.predict(x)
    1
    >>> wm.learn(x, 0)
    Outcome(mistake=True, updated=True)
    >>> wm.weights().tolist()
    [1.0, 0.5, 0.5]
    """

    kind = "weighted-majority"
    value_range = (0.0, 1.0)
    _parameter_constraints = {
        "n_experts": Integer(1, MAX_SIZE),
        "beta": Real(0.0, 1.0, high_open=True),
        "update": Options(("every_trial", "on_mistake")),
        "labels": Labels(),
        "weight_floor": Real(0.0, 1.0, high_open=True),
        "fixed_share": Real(0.0, 1.0, high_open=True),
        "brier": Real(0.0, BRIER_LIMIT),
    }
    _state_arrays = {"u_": "float64", "scalars_": "float64"}

    def __init__(
        self,
        n_experts: int,
        labels: Sequence[Label],
        beta: float = 0.5,
        update: str = "every_trial",
        weight_floor: float = 0.0,
        fixed_share: float = 0.0,
        brier: float = 0.0,
    ) -> None:
        self.n_experts = n_experts
        self.labels = labels  # type: ignore[assignment]
        self.beta = beta
        self.update = update
        self.weight_floor = weight_floor
        self.fixed_share = fixed_share
        self.brier = brier
        self._initialise()

    def spec_params(self) -> dict[str, Any]:
        # an option at 0 is left out: the spec (and state) are those of a learner without it
        params = tracking_off(self.get_params())
        return {k: v for k, v in params.items() if k != "brier" or v != 0}

    def _reset_state(self) -> None:
        self.u_ = np.ones(self.n_experts)
        # [running sum of the weights, the sum at the last exact count, the weight of an
        # expert never penalised]
        self.scalars_ = np.array([float(self.n_experts), float(self.n_experts), 1.0])

    def _array_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"u_": (self.n_experts,), "scalars_": (-1,)}

    def _check_state(self) -> None:
        if (self.u_ < 0).any():
            raise InvalidState("weighted-majority weights must be non-negative")
        if self.scalars_.shape[0] == 2:  # kept before the untouched weight was: 1 unless
            # rescaled, and no weight exceeds it
            self.scalars_ = np.append(self.scalars_, max(1.0, float(self.u_.max())))
        if self.scalars_.shape[0] != 3 or not 0 < self.scalars_[2] < np.inf:
            raise InvalidState("weighted-majority: expected 3 finite scalars")
        if not np.isclose(self.scalars_[0], self.u_.sum(), rtol=1e-6, atol=1e-300):
            raise InvalidState("weighted-majority running sum does not match its weights")

    def _take(self, old: Learner, at: np.ndarray) -> None:
        """A new expert starts at the weight of one never penalised (1, divided as every
        weight was by the rescales): it has made no mistake yet."""
        assert isinstance(old, WeightedMajority)
        untouched = float(old.scalars_[2])
        self.u_[:] = untouched
        self.u_[at] = old.u_
        self.scalars_[...] = old.scalars_
        self.scalars_[0] += untouched * (self.n_experts - old.n_experts)

    def _scores(self, x: Experts) -> np.ndarray:
        picks = np.empty((len(x), 2), dtype=np.int64)
        totals, _ = kernel.votes(self.u_, x.expert, x.cls, x.value, self.n_classes, picks)
        return np.asarray(totals)

    def _learn(self, x: Experts, c: int) -> tuple[int, bool]:
        return kernel.learn(
            self.u_,
            self.scalars_,
            float(self.beta),
            float(self.weight_floor),
            float(self.fixed_share),
            float(self.brier),
            self.update == "every_trial",
            x.expert,
            x.cls,
            x.value,
            self.n_classes,
            c,
        )

    def _learn_run(
        self, b: ExpertBatch, ys: np.ndarray, predicted: np.ndarray, updates: np.ndarray
    ) -> int:
        return int(
            kernel.learn_batch(
                self.u_, self.scalars_, float(self.beta), float(self.weight_floor),
                float(self.fixed_share), float(self.brier), self.update == "every_trial",
                b.indptr, b.expert, b.cls, b.value, self.n_classes, ys, predicted, updates,
            )
        )  # fmt: skip

    def weights(self) -> np.ndarray:
        return self.u_.copy()

    def snapshot(self) -> WeightedMajorityHypothesis:  # type: ignore[override]
        return WeightedMajorityHypothesis(self.u_, self.labels, self._check)
