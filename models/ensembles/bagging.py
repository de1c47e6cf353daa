"""On-line bagging and boosting (Oza & Russell 2001, *Online Bagging and Boosting*; River).

Both present each trial to every copy of a base learner K times, K drawn from a Poisson
distribution. The draws of trial t come from a generator seeded by (seed, t), taken in
model order, so replaying the same trials replays the same draws and no generator state
needs saving: the trial counter is the only randomness state.

Refusals: roll back. The copies share one spec, so either none can refuse or every trial
of a copy (each of its K repeats) leaves an undo token; a refusal undoes them all, latest
first, and boosting's lambda sums with them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from models.core.hypothesis import Hypothesis, InstanceCheck, Label, frozen
from models.core.kinds import build, size_name
from models.core.learner import Learner, Spec
from models.core.nested import (
    build_inner,
    check_size,
    import_children,
    inner_spec,
    input_kind_of,
)
from models.core.params import MAX_SIZE, Integer, InvalidParameter, Labels, Options
from models.core.state import InvalidState
from models.kernels.common import argmax_first

__all__ = [
    "EnsembleHypothesis",
    "OnlineBagging",
    "OnlineBoosting",
    "boosting_scores",
    "boosting_weights",
    "trial_rng",
]

MAX_MODELS = 1000
#: Boosting's lambda is kept at most this (far beyond any real stream), and numpy is never
#: asked for Poisson(lambda) above POISSON_CAP (K is capped by max_repeats anyway).
LAMBDA_MAX = 1e100
POISSON_CAP = 1e6


def trial_rng(seed: int, trial: int) -> np.random.Generator:
    """The generator of trial ``trial``'s draws (``trial`` counts from 0).

    >>> trial_rng(7, 3).poisson(1.0, 4).tolist() == trial_rng(7, 3).poisson(1.0, 4).tolist()
    True
    """
    return np.random.default_rng([seed, trial])


def boosting_weights(lambda_sc: np.ndarray, lambda_sw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each model's vote weight log((1 - eps) / eps) = ln(sc) - ln(sw), and which are perfect.

    A model with eps >= 1/2, or not yet scored, gets weight 0. A model with eps = 0 (some
    correct weight, no wrong weight) would have an infinite weight; it is flagged in the
    second array instead (see :func:`boosting_scores`).
    """
    sc, sw = np.asarray(lambda_sc), np.asarray(lambda_sw)
    useful = (sw > 0.0) & (sw < sc)
    w = np.zeros(sc.shape)
    w[useful] = np.log(sc[useful]) - np.log(sw[useful])
    return w, (sw == 0.0) & (sc > 0.0)


def boosting_scores(
    votes: np.ndarray, weights: np.ndarray, perfect: np.ndarray, k: int
) -> np.ndarray:
    """Summed vote weights per class; perfect models outvote all others.

    Infinite weights are read as a limit: the classes with the most votes from perfect
    models win, and the finite weights (scaled below 1) only break ties among them.
    """
    s = np.bincount(votes, weights=weights, minlength=k)
    if perfect.any():
        s = np.bincount(votes[perfect], minlength=k) + s / (1.0 + weights.sum())
    return s


class EnsembleHypothesis(Hypothesis):
    """An immutable ensemble: the models' snapshots and how they vote."""

    __slots__ = ("check", "labels", "model_weights", "models", "perfect", "vote", "weights")

    def __init__(
        self,
        models: Sequence[Hypothesis],
        labels: tuple[Label, ...],
        check: InstanceCheck,
        vote: str,
        weights: np.ndarray,
        model_weights: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.models = tuple(models)
        self.labels = labels
        self.check = check
        self.vote = vote
        self.weights = frozen(weights)
        w, p = model_weights or (np.zeros(0), np.zeros(0, dtype=bool))
        self.model_weights, self.perfect = frozen(w), np.array(p, dtype=bool)
        self.perfect.flags.writeable = False

    def scores(self, x: Any) -> np.ndarray:
        x = self.check(x)
        k = len(self.labels)
        if self.vote == "scores":
            s = np.zeros(k)
            for h in self.models:
                s += h.scores(x)
            return s
        votes = np.array([h.predict_class(x) for h in self.models], dtype=np.int64)
        if self.vote == "majority":
            return np.bincount(votes, minlength=k).astype(np.float64)
        return boosting_scores(votes, self.model_weights, self.perfect, k)


class _Ensemble(Learner):
    """Copies of one base learner, built with the ensemble's labels and size.

    The ensemble takes the base learner's instance form and value range, and keeps the
    size under the matching name (``n_features`` or ``n_experts``; the other is None).
    """

    learner: Mapping[str, Any] | Learner
    n_features: int | None
    n_experts: int | None
    n_models: int
    seed: int
    models_: list[Learner]

    @classmethod
    def input_kind_for(cls, params: Mapping[str, Any]) -> str:
        return input_kind_of(params.get("learner"))

    def _check_params(self) -> None:
        kind = input_kind_of(self.learner)
        size = check_size(self, kind)
        if size * self.n_models > MAX_SIZE:
            raise InvalidParameter(
                size_name(kind),
                size,
                f"at most {MAX_SIZE // self.n_models} for {self.n_models} models",
            )
        base = build_inner(self.learner, labels=self.labels, size=size)
        self._learner = inner_spec(base)
        self._model_spec = base.spec()
        self.input_kind = base.input_kind
        self.value_range = base.value_range

    def spec_params(self) -> dict[str, Any]:
        return {**self.get_params(), "learner": self._learner}

    @property
    def input_size(self) -> int:
        return int(self.n_features or self.n_experts or 0)

    def _reset_state(self) -> None:
        self.models_ = [build(self._model_spec) for _ in range(self.n_models)]

    def _array_shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: (self.n_models,) for name in self._state_arrays}

    def _can_grow(self) -> None:
        self.models_[0]._can_grow()

    def _take(self, old: Learner, at: np.ndarray) -> None:
        """Every copy grows as its kind does; the per-copy arrays (boosting's lambda sums)
        carry over, and the draws, seeded by the trial count, go on as they would have."""
        assert isinstance(old, _Ensemble)
        for model, was in zip(self.models_, old.models_, strict=True):
            model._adopt(was, at)
        for name in self._state_arrays:
            getattr(self, name)[...] = getattr(old, name)

    def _export_extra(self) -> dict[str, Any]:
        return {f"model:{m}": model.export_state() for m, model in enumerate(self.models_)}

    def _import_extra(self, children: Mapping[str, Any]) -> None:
        import_children(self.models_, children, "model", self.kind)

    def can_refuse(self) -> bool:
        return self.models_[0].can_refuse()

    def _save(self, x: Any, whole: bool) -> Any:
        return None  # the models' trials journal themselves

    def _restore(self, saved: Any) -> None:
        pass

    def _votes(self, x: Any) -> np.ndarray:
        return np.array([self._class[m.predict(x)] for m in self.models_], dtype=np.int64)

    def weights(self) -> np.ndarray:
        """The models' weight vectors, stacked on a last axis of length n_models."""
        return np.stack([m.weights() for m in self.models_], axis=-1)  # type: ignore[attr-defined]


class OnlineBagging(_Ensemble):
    """Oza-Russell on-line bagging: each copy sees each trial K ~ Poisson(1) times.

    The ensemble predicts by unweighted majority of the copies' labels (``vote="majority"``;
    ``scores`` are the vote counts) or by the sum of their score vectors (``"scores"``),
    ties to the smallest class. A trial is a mistake when the ensemble's prediction, made
    before any copy learns, is wrong; it updates when any copy updates. A copy drawn K = 0
    times does not learn, so a mistake need not update.

    Parameters
    ----------
    learner
        Spec (or instance) of the base learner, of any kind; its instance form is the
        ensemble's.
    labels
        The class labels, in class order.
    n_features, n_experts
        The instance size: n_features for an attribute learner, n_experts for a sub-expert
        learner (the other stays None). Supplied by the model.
    n_models
        Number of copies.
    seed
        Seed of the Poisson draws: trial t uses ``trial_rng(seed, t)``.
    vote
        ``"majority"`` or ``"scores"``.

    Examples
    --------
    >>> bag = OnlineBagging({"kind": "perceptron"}, [1, -1], n_features=2, n_models=3, seed=1)
    >>> bag.draws(0).tolist()  # trial 0: the copies learn it 2, 1 and 1 times
    [2, 1, 1]
    >>> bag.learn([1.0, 0.0], -1)
    Outcome(mistake=True, updated=True)
    >>> bag.scores([1.0, 0.0]).tolist()  # votes for 1 and -1
    [0.0, 3.0]
    """

    kind = "bagging"
    _parameter_constraints = {
        "learner": Spec(),
        "labels": Labels(),
        "n_features": Integer(1, MAX_SIZE, optional=True),
        "n_experts": Integer(1, MAX_SIZE, optional=True),
        "n_models": Integer(1, MAX_MODELS),
        "seed": Integer(0, 2**63 - 1),
        "vote": Options(("majority", "scores")),
    }

    def __init__(
        self,
        learner: Mapping[str, Any] | Learner,
        labels: Sequence[Label],
        n_features: int | None = None,
        n_experts: int | None = None,
        n_models: int = 10,
        seed: int = 0,
        vote: str = "majority",
    ) -> None:
        self.learner = learner
        self.labels = labels  # type: ignore[assignment]
        self.n_features = n_features
        self.n_experts = n_experts
        self.n_models = n_models
        self.seed = seed
        self.vote = vote
        self._initialise()

    def draws(self, trial: int) -> np.ndarray:
        """K for every copy at trial ``trial`` (from 0): how often each copy sees it."""
        return trial_rng(self.seed, trial).poisson(1.0, self.n_models)

    def _scores(self, x: Any) -> np.ndarray:
        if self.vote == "scores":
            s = np.zeros(self.n_classes)
            for m in self.models_:
                s += m.scores(x)
            return s
        return np.bincount(self._votes(x), minlength=self.n_classes).astype(np.float64)

    def _learn(self, x: Any, c: int) -> tuple[int, bool]:
        predicted = int(argmax_first(self._scores(x)))
        y = self.labels[c]
        updated = False
        for model, k in zip(self.models_, self.draws(self.trials_).tolist(), strict=True):
            for _ in range(k):
                updated |= self._member_learns(model, x, y).updated
        return predicted, updated

    def snapshot(self) -> EnsembleHypothesis:
        models = [m.snapshot() for m in self.models_]
        return EnsembleHypothesis(models, self.labels, self._check, self.vote, self.weights())


class OnlineBoosting(_Ensemble):
    """Oza-Russell on-line boosting: models in sequence, each trial reweighted.

    For each trial lambda = 1; for m = 1..M, h_m learns the trial K ~ Poisson(lambda) times
    (K at most ``max_repeats``); then if h_m(x) = y, lambda_sc_m += lambda and lambda is
    multiplied by (sc + sw) / (2 sc), else lambda_sw_m += lambda and it is multiplied by
    (sc + sw) / (2 sw). The ensemble predicts arg-max_y sum over models voting y of
    log((1 - eps_m) / eps_m), eps_m = sw / (sc + sw), skipping models with eps_m >= 1/2.
    A model with eps_m = 0 has an infinite weight: such models outvote all others, by
    majority among themselves (:func:`boosting_scores`).

    A trial updates when a model updates or a model's vote weight changes.

    Parameters
    ----------
    learner, labels, n_features, n_experts, n_models, seed
        As for :class:`OnlineBagging`.
    max_repeats
        The most times one model learns one trial, so a trial costs at most
        n_models * max_repeats base trials (Oza-Russell has no cap; it binds only when
        lambda is large).

    Examples
    --------
    >>> boost = OnlineBoosting({"kind": "perceptron"}, labels=[1, -1], n_features=2, n_models=2)
    >>> boost.learn([1.0, 0.0], -1)
    Outcome(mistake=True, updated=True)
    >>> boost.lambda_sc_.tolist(), boost.lambda_sw_.tolist()
    ([1.0, 0.0], [0.0, 0.5])
    """

    kind = "boosting"
    _parameter_constraints = {
        "learner": Spec(),
        "labels": Labels(),
        "n_features": Integer(1, MAX_SIZE, optional=True),
        "n_experts": Integer(1, MAX_SIZE, optional=True),
        "n_models": Integer(1, MAX_MODELS),
        "seed": Integer(0, 2**63 - 1),
        "max_repeats": Integer(1, 10_000),
    }
    _state_arrays = {"lambda_sc_": "float64", "lambda_sw_": "float64"}

    def __init__(
        self,
        learner: Mapping[str, Any] | Learner,
        labels: Sequence[Label],
        n_features: int | None = None,
        n_experts: int | None = None,
        n_models: int = 10,
        seed: int = 0,
        max_repeats: int = 100,
    ) -> None:
        self.learner = learner
        self.labels = labels  # type: ignore[assignment]
        self.n_features = n_features
        self.n_experts = n_experts
        self.n_models = n_models
        self.seed = seed
        self.max_repeats = max_repeats
        self._initialise()

    def _reset_state(self) -> None:
        super()._reset_state()
        self.lambda_sc_ = np.zeros(self.n_models)
        self.lambda_sw_ = np.zeros(self.n_models)

    def _check_state(self) -> None:
        if (self.lambda_sc_ < 0).any() or (self.lambda_sw_ < 0).any():
            raise InvalidState("boosting lambda_sc_ and lambda_sw_ must be non-negative")

    def _save(self, x: Any, whole: bool) -> Any:
        return self.lambda_sc_.copy(), self.lambda_sw_.copy()

    def _restore(self, saved: Any) -> None:
        sc, sw = saved
        self.lambda_sc_[...], self.lambda_sw_[...] = sc, sw

    def vote_weights(self) -> tuple[np.ndarray, np.ndarray]:
        """Each model's vote weight and whether it is perfect: see :func:`boosting_weights`."""
        return boosting_weights(self.lambda_sc_, self.lambda_sw_)

    def _scores(self, x: Any) -> np.ndarray:
        return boosting_scores(self._votes(x), *self.vote_weights(), self.n_classes)

    def _learn(self, x: Any, c: int) -> tuple[int, bool]:
        votes = self._votes(x)
        before = self.vote_weights()
        predicted = int(argmax_first(boosting_scores(votes, *before, self.n_classes)))
        rng = trial_rng(self.seed, self.trials_)
        sc, sw = self.lambda_sc_, self.lambda_sw_
        y, lam, updated = self.labels[c], 1.0, False
        for m, model in enumerate(self.models_):
            k = min(int(rng.poisson(min(lam, POISSON_CAP))), self.max_repeats)
            for _ in range(k):
                updated |= self._member_learns(model, x, y).updated
            vote = votes[m] if k == 0 else self._class[model.predict(x)]
            if vote == c:
                sc[m] += lam
                lam *= 0.5 + 0.5 * (sw[m] / sc[m])  # (sc + sw) / (2 sc), without overflow
            else:
                sw[m] += lam
                lam *= 0.5 + 0.5 * (sc[m] / sw[m])
            lam = min(lam, LAMBDA_MAX)
        after = self.vote_weights()
        changed = not all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
        return predicted, updated or changed

    def snapshot(self) -> EnsembleHypothesis:
        models = [m.snapshot() for m in self.models_]
        return EnsembleHypothesis(
            models, self.labels, self._check, "boosting", self.weights(), self.vote_weights()
        )
