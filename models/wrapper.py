"""The shared plumbing of wrappers that compose one inner learner given by a spec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from models.base import Learner
from models.params import InvalidParameter
from models.state import InvalidState

__all__ = ["HasInner", "Wrapper", "inner_spec"]


def inner_spec(learner: Mapping[str, Any] | Learner) -> dict[str, Any]:
    """A nested learner as the spec its wrapper builds with its own context.

    A learner object's spec loses the context parameters it was built with; a spec
    mapping is copied as given, so ``build`` refuses a context parameter set in it.
    """
    from models.registry import CONTEXT_PARAMS

    if isinstance(learner, Learner):
        return {k: v for k, v in learner.spec().items() if k not in CONTEXT_PARAMS}
    return dict(learner)


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
        from models.registry import kind_of

        inner = params.get("learner")
        if isinstance(inner, Learner):
            return inner.input_kind
        try:
            return kind_of(inner).input_kind_for(inner)  # type: ignore[arg-type]
        except InvalidParameter as exc:
            raise InvalidParameter("learner." + exc.name, exc.value, exc.expected) from None

    @property
    def input_size(self) -> int:
        size = self.n_features if self.input_kind == "attributes" else self.n_experts
        return int(size or 0)

    def _build_inner(self) -> None:
        from models.registry import build

        kind = self.input_kind_for({"learner": self.learner})
        given, other = ("n_features", "n_experts")
        if kind != "attributes":
            given, other = other, given
        if getattr(self, given) is None or getattr(self, other) is not None:
            raise InvalidParameter(
                given, getattr(self, given), f"an integer (and {other} null) for a {kind} learner"
            )
        try:
            inner = build(inner_spec(self.learner), labels=self.labels, size=getattr(self, given))
        except InvalidParameter as exc:
            raise InvalidParameter("learner." + exc.name, exc.value, exc.expected) from None
        self.learner = inner_spec(inner)
        self.learner_ = inner
        self.input_kind = inner.input_kind  # type: ignore[misc]
        self.value_range = inner.value_range  # type: ignore[misc]

    def _check_params(self) -> None:
        self._build_inner()

    def _reset_state(self) -> None:
        self.learner_.reset()
