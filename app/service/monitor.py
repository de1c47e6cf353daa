"""The contract of a monitor: what follows a model's judged trials beside its learner
(see :mod:`app.service.monitors`, which keeps the kinds)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from models.core.instance import Attributes, Experts
from models.core.learner import Learner
from models.inputs.space import InputSpace
from models.kernels import watch as kernels

__all__ = ["WARM_ROWS", "Kind", "Monitor", "top_votes"]

#: two trials of two sub-experts, as :meth:`Experts.rows` takes them: what the watches'
#: warm-ups run their kernels on as rows of a batch
WARM_ROWS = (
    np.array([0, 1, 0, 1]),
    np.array([0, 1, 1, 1]),
    np.ones(4),
    np.array([0, 2, 4]),
    np.array([2, 2]),
    np.array([2, 2]),
    np.ones(2),
    np.ones(2),
)


class Monitor(Protocol):
    """One monitor of one model."""

    def judged(self, seq: int, x: Attributes | Experts, y: int, served: int, own: int) -> None:
        """Log entry ``seq`` was a trial of instance ``x`` and class index ``y``; the model
        served ``served`` (its own prediction ``own``, for a learn) and predicted ``own``
        as the entry was replayed."""

    def judged_run(
        self,
        first: int,
        xs: Sequence[Attributes | Experts],
        ys: Sequence[int],
        predicted: Sequence[int],
    ) -> None:
        """:meth:`judged` of the learn entries from ``first`` on, together (each served
        and predicted ``predicted``)."""

    def grown(self, space: InputSpace) -> None:
        """The model's input became ``space`` (a change entry); :meth:`relearned` follows
        with the learner grown to it."""

    def relearned(self, learner: Learner) -> None:
        """The model's learner is now ``learner``: grown with a change of the input, or
        another (a promoted challenger). Read there, never kept nor changed."""

    def export(self) -> Any:
        """Its state: plain values."""

    def figures(self) -> dict[str, Any]:
        """What it shows."""


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind of monitor: whether it ``follows`` a model of an input space, form and
    learner, a ``fresh`` one for it, and one ``read`` from its exported state
    (:class:`InvalidState` when it does not fit). The learner is the model's as it is
    then (its kind, parameters and state); a monitor reads it there and keeps none of it
    but plain values."""

    follows: Callable[[InputSpace, str, Learner], bool]
    fresh: Callable[[InputSpace, str, Learner], Monitor]
    read: Callable[[Any, InputSpace, str, Learner], Monitor]


def top_votes(x: Experts, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The sub-experts below ``size`` that vote in ``x``, ascending, and each one's
    top-voted class (the lowest of equal votes): what the drift and bound watches judge
    a sub-expert by, and what Weighted Majority's sub-experts predict."""
    e = x.expert
    if not e.size:
        return e, e
    voters, tops = kernels.top_votes(e, x.cls, x.value, size)
    return voters, tops
