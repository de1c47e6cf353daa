"""Nested learners shared by the wrappers: building, error naming and state import."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from models.base import Learner
from models.params import InvalidParameter
from models.state import InvalidState


def _nested(exc: InvalidParameter) -> InvalidParameter:
    return InvalidParameter("learner." + exc.name, exc.value, exc.expected)


def _rebuild(spec: Mapping[str, Any]) -> Learner:
    from models.registry import build

    return build(spec)


def _import_children(
    current: Sequence[Learner], children: Mapping[str, Any], role: str, kind: str
) -> None:
    """Import ``children["role:i"]`` into learner i (into the staged copy that
    ``Learner.import_state`` reads a document into, so a failure changes nothing)."""
    expected = [f"{role}:{i}" for i in range(len(current))]
    if set(children) != set(expected):
        extra = sorted(set(children) - set(expected))
        missing = sorted(set(expected) - set(children))
        raise InvalidState(f"{kind} state.children: missing {missing}, unexpected {extra}")
    for name, learner in zip(expected, current, strict=True):
        learner.import_state(children[name])
