"""Nested learners, written once for every wrapper and ensemble that holds them.

A wrapper names its nested learners in its parameters, as specs or learner objects, and
builds them with its own labels and size (the context), under the size name their input
kind calls for. An error in a nested spec is reported under the path of the nested
learner (``learner.alpha``, ``learners[2].kind``), and nested states travel as children of
the wrapper's state document.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from models.core.kinds import build, kind_of, size_name
from models.core.learner import CONTEXT_PARAMS, CannotGrow, Learner
from models.core.params import InvalidParameter
from models.core.state import InvalidState

__all__ = [
    "HasInner",
    "Wrapper",
    "build_inner",
    "check_size",
    "import_children",
    "inner_spec",
    "input_kind_of",
    "nested_error",
]


def inner_spec(learner: Mapping[str, Any] | Learner) -> dict[str, Any]:
    """A nested learner as the spec its wrapper builds with its own context.

    A learner object's spec loses the context parameters it was built with; a spec
    mapping is copied as given, so ``build`` refuses a context parameter set in it.
    """
    if isinstance(learner, Learner):
        return {k: v for k, v in learner.spec().items() if k not in CONTEXT_PARAMS}
    return dict(learner)


def nested_error(exc: InvalidParameter, path: str = "learner") -> InvalidParameter:
    """``exc``, raised by a nested learner, named under that learner's ``path``."""
    return InvalidParameter(f"{path}.{exc.name}", exc.value, exc.expected)


def input_kind_of(learner: Any, path: str = "learner") -> str:
    """The input kind of a nested learner given as a spec or a learner object."""
    if isinstance(learner, Learner):
        return learner.input_kind
    try:
        return kind_of(learner).input_kind_for(learner)
    except InvalidParameter as exc:
        raise nested_error(exc, path) from None


def check_size(owner: Learner, input_kind: str, what: str = "") -> int:
    """The size ``owner`` holds for nested learners of ``input_kind`` (``what``: how the
    error names them): set under the matching name, the other left None."""
    given = size_name(input_kind)
    other = "n_experts" if given == "n_features" else "n_features"
    size = getattr(owner, given)
    if size is None or getattr(owner, other) is not None:
        what = what or f"a {input_kind} learner"
        raise InvalidParameter(given, size, f"an integer (and {other} null) for {what}")
    return int(size)


def build_inner(
    learner: Mapping[str, Any] | Learner,
    *,
    labels: Sequence[Hashable] | None,
    size: int,
    path: str = "learner",
) -> Learner:
    """Build a nested learner with its wrapper's context; errors name it by ``path``."""
    try:
        return build(inner_spec(learner), labels=labels, size=size)
    except InvalidParameter as exc:
        raise nested_error(exc, path) from None


def import_children(
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


class HasInner:
    """One inner learner, ``learner_``: its state travels as the child ``learner``, and the
    wrapper shows the inner's linear view (for averaging) and whether it may refuse an
    update or rescale as its own."""

    kind: ClassVar[str]
    learner_: Learner

    def _export_extra(self) -> dict[str, Any]:
        return {"learner": self.learner_.export_state()}

    def _import_extra(self, children: Mapping[str, Any]) -> None:
        if set(children) != {"learner"}:
            raise InvalidState(
                f"{self.kind} state: expected child 'learner', got {sorted(children)}"
            )
        self.learner_.import_state(children["learner"])

    def can_refuse(self) -> bool:
        return self.learner_.can_refuse()

    def _can_grow(self) -> None:
        if getattr(type(self), "_take", None) is Learner._take:
            raise CannotGrow(f"{self.kind} cannot take new inputs or labels yet")
        self.learner_._can_grow()

    def silent_rows(self) -> np.ndarray:
        return self.learner_.silent_rows()

    def rescales(self) -> bool:
        return self.learner_.rescales()

    def support(self, x: Any) -> np.ndarray:
        return self.learner_.support(x)

    def linear_rows(self, idx: np.ndarray | None = None) -> np.ndarray:
        return self.learner_.linear_rows(idx)

    def linear_coef(self) -> np.ndarray:
        return self.learner_.linear_coef()

    def linear_scale(self) -> float:
        return self.learner_.linear_scale()

    def linear_epoch(self) -> int:
        return self.learner_.linear_epoch()

    def linear_shift(self) -> float:
        return self.learner_.linear_shift()


class Wrapper(HasInner, Learner):
    """A learner around one inner learner (``learner_``), built with the same labels and size.

    The wrapper takes the inner learner's instance form and value range. Subclasses store
    ``learner``, ``labels``, ``n_features`` and ``n_experts`` (one of the two is set, per the
    inner learner's input kind) and call ``self._initialise()``; they extend
    ``_check_params`` after calling ``self._build_inner()``.
    """

    learner: Any
    n_features: int | None
    n_experts: int | None
    learner_: Learner

    @classmethod
    def input_kind_for(cls, params: Mapping[str, Any]) -> str:
        return input_kind_of(params.get("learner"))

    @property
    def input_size(self) -> int:
        return int(getattr(self, size_name(self.input_kind)) or 0)

    def spec_params(self) -> dict[str, Any]:
        return {**self.get_params(), "learner": self.learner_}

    def _build_inner(self) -> None:
        kind = input_kind_of(self.learner)
        size = check_size(self, kind)
        self.learner_ = build_inner(self.learner, labels=self.labels, size=size)
        self.input_kind = self.learner_.input_kind
        self.value_range = self.learner_.value_range

    def _check_params(self) -> None:
        self._build_inner()

    def _reset_state(self) -> None:
        self.learner_.reset()
