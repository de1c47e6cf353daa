"""Immutable hypotheses: what a learner hands out to score and predict without learning.

A hypothesis shares its learner's :class:`InstanceCheck`, so it rejects exactly what the
learner rejects, and sums its scores in the learner's order, so it predicts exactly like
the learner, ties included.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from models.core.instance import Attributes, Experts, InvalidInstance
from models.kernels.common import argmax_first, dot, linear_max_scores

__all__ = [
    "Hypothesis",
    "InstanceCheck",
    "Label",
    "LinearHypothesis",
    "LinearMaxHypothesis",
    "frozen",
]

Label = Hashable


_SIZE, _LOW, _HIGH = attrgetter("size"), attrgetter("low"), attrgetter("high")
_CLASSES = attrgetter("n_classes")


class InstanceCheck:
    """Converts input to a learner's instance form and checks size, classes and range.

    Learners and their snapshots share one, so a snapshot rejects exactly what its learner
    rejects.
    """

    __slots__ = ("high", "input_kind", "low", "n_classes", "name", "size")

    def __init__(
        self,
        name: str,
        input_kind: str,
        size: int,
        n_classes: int,
        value_range: tuple[float, float] | None,
    ) -> None:
        self.name = name
        self.input_kind = input_kind
        self.size = size
        self.n_classes = n_classes
        self.low, self.high = value_range or (-np.inf, np.inf)

    def __call__(self, x: Any) -> Any:
        if self.input_kind == "attributes":
            if type(x) is not Attributes:
                x = Attributes.coerce(x)
        elif type(x) is not Experts:
            x = Experts.coerce(x)
        self.fit(x)
        return x

    def fits_all(self, xs: Sequence[Any]) -> bool:
        """Whether every one of ``xs`` is already of this learner's instance form and
        fits, judged over them together; False when one does not (or is of another
        type): then check each, which names what is wrong."""
        kind = Attributes if self.input_kind == "attributes" else Experts
        if not xs or not all(type(x) is kind for x in xs):
            return False
        return (
            max(map(_SIZE, xs)) <= self.size
            and self.low <= min(map(_LOW, xs))
            and max(map(_HIGH, xs)) <= self.high
            and (kind is Attributes or max(map(_CLASSES, xs)) <= self.n_classes)
        )

    def fit(self, x: Any) -> None:
        """Raise InvalidInstance unless ``x`` (an instance or a batch) fits."""
        classes = getattr(x, "n_classes", 0)
        if (
            x.size <= self.size
            and self.low <= x.low
            and x.high <= self.high
            and classes <= self.n_classes
        ):
            return
        if x.size > self.size:
            unit = "features" if self.input_kind == "attributes" else "sub-experts"
            raise InvalidInstance(
                f"instance has {x.size} {unit}, but the learner was built for {self.size}"
            )
        if classes > self.n_classes:
            raise InvalidInstance(
                f"instance votes for class {classes - 1}, but the learner has "
                f"{self.n_classes} classes"
            )
        bad = x.low if x.low < self.low else x.high
        raise InvalidInstance(
            f"{self.name} needs values in [{self.low:g}, {self.high:g}], got {bad:g}"
        )


class Hypothesis:
    """An immutable hypothesis: scores instances and predicts labels, never learns."""

    labels: tuple[Label, ...]
    check: InstanceCheck

    def scores(self, x: Any) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def predict_class(self, x: Any) -> int:
        return int(argmax_first(self.scores(x)))

    def predict(self, x: Any) -> Label:
        return self.labels[self.predict_class(x)]


def frozen(a: np.ndarray) -> np.ndarray:
    out = np.array(a, dtype=np.float64)
    out.flags.writeable = False
    return out


class LinearHypothesis(Hypothesis):
    """Binary linear threshold: margin m = w.x - threshold, scores (m, -m).

    The first label (class 0, +1) is predicted iff m > 0, or m == 0 when not ``strict``.
    The margin is summed in the same order as the learners sum theirs, so a snapshot
    predicts exactly like its learner, ties included.
    """

    __slots__ = ("check", "labels", "strict", "threshold", "weights")

    def __init__(
        self,
        weights: np.ndarray,
        threshold: float,
        labels: tuple[Label, ...],
        strict: bool,
        check: InstanceCheck,
    ) -> None:
        self.weights = frozen(weights)
        self.threshold = float(threshold)
        self.labels = labels
        self.strict = strict
        self.check = check

    def margin(self, x: Any) -> float:
        x = self.check(x)
        return float(dot(self.weights, x.indices, x.values)) - self.threshold

    def scores(self, x: Any) -> np.ndarray:
        m = self.margin(x)
        return np.array([m, -m])

    def predict_class(self, x: Any) -> int:
        m = self.margin(x)
        return 0 if (m > 0 or (m == 0 and not self.strict)) else 1


class LinearMaxHypothesis(Hypothesis):
    """Linear-max over sub-experts: s_j = scale * w.x^j, predict the first arg-max.

    ``weights`` are kept in the learner's own scale and the prediction is taken before
    multiplying by ``scale``, so it matches the learner's exactly, ties included;
    ``normalized()`` gives scale * weights.
    """

    __slots__ = ("check", "labels", "scale", "weights")

    def __init__(
        self,
        weights: np.ndarray,
        labels: tuple[Label, ...],
        check: InstanceCheck,
        scale: float = 1.0,
    ) -> None:
        self.weights = frozen(weights)
        self.labels = labels
        self.check = check
        self.scale = float(scale)

    def normalized(self) -> np.ndarray:
        return self.weights * self.scale

    def _raw(self, x: Any) -> np.ndarray:
        x = self.check(x)
        return np.asarray(
            linear_max_scores(self.weights, x.expert, x.cls, x.value, len(self.labels))
        )

    def scores(self, x: Any) -> np.ndarray:
        return self._raw(x) * self.scale

    def predict_class(self, x: Any) -> int:
        return int(argmax_first(self._raw(x)))
