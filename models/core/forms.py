"""The two basic learner forms: binary threshold learners over attributes and linear-max
learners over sub-experts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from models.core.hypothesis import Label, LinearHypothesis, LinearMaxHypothesis
from models.core.instance import (
    AttributeBatch,
    Attributes,
    ExpertBatch,
    Experts,
    InvalidInstance,
)
from models.core.learner import Learner
from models.kernels.dispatch import binary_fit_batch

__all__ = ["BinaryLearner", "ExpertRunLearner", "MulticlassLearner", "RunKernel", "classes_of"]

#: A compiled run of binary trials: (batch, sign of each, mistakes, updates) -> the
#: trials applied (see :func:`learned_prefix`).
RunKernel = Callable[[Any, np.ndarray, np.ndarray, np.ndarray], int]


def classes_of(learner: Learner, ys: Sequence[Label]) -> np.ndarray:
    """The class index of each label of ``ys`` (int64), as :meth:`Learner.class_of` gives
    it: looked up together, or each by ``class_of`` (which says what is wrong) when a
    label is a bool or unknown."""
    table = learner._class
    try:
        if bool not in set(map(type, ys)):  # (True == 1 would pass as the label 1)
            return np.fromiter(map(table.__getitem__, ys), np.int64, len(ys))
    except (KeyError, TypeError):
        pass
    return np.array([learner.class_of(y) for y in ys], dtype=np.int64)


def learned_prefix(
    learner: Learner, batch: Any, ys: np.ndarray, run: RunKernel
) -> tuple[np.ndarray, np.ndarray, int]:
    """Learn the trials of ``batch`` in order by ``run``, as many as it applies, and count
    them: (mistakes, updates, trials applied), as :meth:`BalancedWinnow.learn_prefix`
    says. ``run`` stops at a trial whose update it refuses, which changes nothing; that
    trial's flags are cleared."""
    if len(ys) != len(batch):
        raise InvalidInstance(f"{len(batch)} instances but {len(ys)} labels")
    mistakes = np.zeros(ys.size, dtype=bool)
    updates = np.zeros(ys.size, dtype=bool)
    done = int(run(batch, ys, mistakes, updates))
    if done < ys.size:
        mistakes[done] = updates[done] = False
    learner.count_run(mistakes[:done], updates[:done])
    return mistakes, updates, done


class BinaryLearner(Learner):
    """A binary linear-threshold learner over attributes; class 0 is +1, class 1 is -1.

    Subclasses provide ``_margin(idx, val)`` (score minus threshold), ``_fit(idx, val, y,
    force)`` returning (predicted sign, updated), ``weights_at(idx)`` and ``weights()`` (the
    effective weight vector) and the attributes ``threshold`` and ``strict``.
    """

    input_kind = "attributes"
    _checks_first = True
    fixed_labels = True
    #: True for learners that update on small correct margins (ALMA).
    margin_based: ClassVar[bool] = False
    #: True for threshold-0 learners the sub-expert conversion accepts.
    convertible: ClassVar[bool] = False
    n_features: int
    strict: bool = False

    @property
    def input_size(self) -> int:
        return self.n_features

    @property
    def effective_threshold(self) -> float:
        return 0.0

    def _margin(self, idx: np.ndarray, val: np.ndarray) -> float:  # pragma: no cover
        raise NotImplementedError

    def _fit(
        self, idx: np.ndarray, val: np.ndarray, y: int, force: bool
    ) -> tuple[int, bool]:  # pragma: no cover - interface
        raise NotImplementedError

    def weights_at(self, idx: np.ndarray) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def weights(self) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def coerce_batch(self, xs: Any) -> AttributeBatch:
        """An :class:`AttributeBatch` (or a sequence of instances) checked against this learner."""
        batch = xs if isinstance(xs, AttributeBatch) else AttributeBatch.from_instances(xs)
        self._check.fit(batch)
        return batch

    def _compiled_prefix(self, xs: Any, ys: Sequence[Label]) -> tuple[np.ndarray, np.ndarray, int]:
        """``learn_prefix`` of a learner whose trial is :func:`binary_fit` of its
        ``kernel_state`` (one compiled loop over the trials, the same calls in order)."""
        batch = self.coerce_batch(xs)
        signs = 1 - 2 * classes_of(self, ys)
        state = self.kernel_state()
        assert state is not None
        fam, w, s, p = state

        def run(b: AttributeBatch, y: np.ndarray, m: np.ndarray, u: np.ndarray) -> int:
            return int(binary_fit_batch(fam, w, s, p, b.indptr, b.indices, b.values, y, m, u))

        return learned_prefix(self, batch, signs, run)

    def margin(self, x: Any) -> float:
        x = self.coerce(x)
        return self._margin(x.indices, x.values)

    def _sign(self, m: float) -> int:
        return 1 if (m > 0 or (m == 0 and not self.strict)) else -1

    def _scores(self, x: Attributes) -> np.ndarray:
        m = self._margin(x.indices, x.values)
        return np.array([m, -m])

    def _predict(self, x: Attributes) -> int:
        return 0 if self._sign(self._margin(x.indices, x.values)) > 0 else 1

    def _learn(self, x: Attributes, c: int) -> tuple[int, bool]:
        sign, updated = self._fit(x.indices, x.values, 1 - 2 * c, False)
        return (0 if sign > 0 else 1), updated

    def snapshot(self) -> LinearHypothesis:
        return LinearHypothesis(
            self.weights(), self.effective_threshold, self.labels, self.strict, self._check
        )


class MulticlassLearner(Learner):
    """A linear-max learner over sub-experts: one weight per sub-expert, s_j = w.x^j."""

    input_kind = "experts"
    _checks_first = True
    n_experts: int

    @property
    def input_size(self) -> int:
        return self.n_experts

    def weights(self) -> np.ndarray:  # pragma: no cover - interface
        """The effective weight vector, one entry per sub-expert."""
        raise NotImplementedError

    def coerce_batch(self, xs: Any) -> ExpertBatch:
        """An :class:`ExpertBatch` (or a sequence of instances) checked against this
        learner."""
        if not isinstance(xs, ExpertBatch):
            items = list(xs)
            if not all(type(x) is Experts for x in items):
                items = [self.coerce(x) for x in items]
            xs = ExpertBatch.from_instances(items)
        self._check.fit(xs)
        return xs

    def snapshot(self) -> LinearMaxHypothesis:
        return LinearMaxHypothesis(self.weights(), self.labels, self._check)


class ExpertRunLearner(MulticlassLearner):
    """A linear-max learner whose trials also run in one compiled loop, ``_learn_run``
    (over an :class:`ExpertBatch` and class indices)."""

    def learn_expert_prefix(
        self, xs: Any, ys: Sequence[Label]
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Learn a run of trials in one compiled loop, with the results and the state of
        one by one: (mistakes, updates, trials applied: fewer than all only where the
        learner refuses an update, which changes nothing from that trial on).

        ``xs`` is an :class:`~models.core.instance.ExpertBatch` or a sequence of instances.
        (Named apart from the attribute learners' ``learn_prefix``, which a worker's
        replay takes for any binary model with an attribute batch.)
        """
        cs, predicted, updates, done = self._classes_run(xs, ys)
        mistakes = predicted != cs
        mistakes[done:] = False
        return mistakes, updates, done

    def learn_expert_classes(
        self, xs: Any, ys: Sequence[Label]
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """:meth:`learn_expert_prefix` with the class each trial predicted in place of
        its mistake: (classes, int64, -1 from the trials not applied on; updates; trials
        applied)."""
        _, predicted, updates, done = self._classes_run(xs, ys)
        return predicted, updates, done

    def _classes_run(
        self, xs: Any, ys: Sequence[Label]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The run of trials ``xs``, ``ys`` by :meth:`_learn_run`, counted: (true
        classes, predicted classes, updates, trials applied)."""
        batch = self.coerce_batch(xs)
        cs = classes_of(self, ys)
        if len(cs) != len(batch):
            raise InvalidInstance(f"{len(batch)} instances but {len(cs)} labels")
        predicted = np.full(cs.size, -1, dtype=np.int64)
        updates = np.zeros(cs.size, dtype=bool)
        done = int(self._learn_run(batch, cs, predicted, updates))
        predicted[done:] = -1  # (a refused trial's, which changed nothing)
        updates[done:] = False
        self.count_run(predicted[:done] != cs[:done], updates[:done])
        return cs, predicted, updates, done

    def _learn_run(
        self, b: ExpertBatch, ys: np.ndarray, predicted: np.ndarray, updates: np.ndarray
    ) -> int:  # pragma: no cover - interface
        """The compiled run of the trials ``b``, ``ys`` (class indices), each one's class
        into ``predicted`` and whether it updated into ``updates``; the trials applied."""
        raise NotImplementedError
