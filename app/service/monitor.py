"""The contract of a monitor: what follows a model's judged trials beside its learner
(see :mod:`app.service.monitors`, which keeps the kinds)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from models.core.instance import Attributes, Experts
from models.inputs.space import InputSpace

__all__ = ["Kind", "Monitor"]


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
        """The model's input became ``space`` (a change entry)."""

    def export(self) -> Any:
        """Its state: plain values."""

    def figures(self) -> dict[str, Any]:
        """What it shows."""


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind of monitor: whether it ``follows`` a model of an input space and form, a
    ``fresh`` one for it, and one ``read`` from its exported state
    (:class:`InvalidState` when it does not fit)."""

    follows: Callable[[InputSpace, str], bool]
    fresh: Callable[[InputSpace, str], Monitor]
    read: Callable[[Any, InputSpace, str], Monitor]
