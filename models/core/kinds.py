"""Declarative specs: build any learner from a JSON-able dict, list every kind.

A spec is ``{"kind": "balanced-winnow", "alpha": 1.2, ...}``. The model a learner serves
supplies the context parameters (``labels`` and the instance size, ``n_features`` for
attribute learners or ``n_experts`` for sub-expert learners): when :func:`build` is given
them, a spec that sets one, at any level of nesting, is refused. Wrappers build their
nested learners the same way, with their own context, so the rule holds at every level.
A spec built without context (an exported state's ``params``) carries its own.
"""

from __future__ import annotations

import inspect
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from models.core.learner import CONTEXT_PARAMS, KINDS, Learner
from models.core.params import InvalidParameter
from models.core.state import InvalidState

__all__ = ["CONTEXT_PARAMS", "KINDS", "build", "describe", "from_state", "kind_of", "size_name"]


def size_name(input_kind: str) -> str:
    """The parameter that holds the instance size of a learner of this input kind."""
    return "n_features" if input_kind == "attributes" else "n_experts"


def kind_of(spec: Any) -> type[Learner]:
    """The learner class a spec names."""
    if not isinstance(spec, Mapping):
        raise InvalidParameter("learner", spec, 'an object such as {"kind": "committee"}')
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise InvalidParameter("kind", kind, "one of " + ", ".join(repr(k) for k in KINDS))
    return KINDS[kind]


def build(
    spec: Mapping[str, Any],
    *,
    labels: Sequence[Hashable] | None = None,
    size: int | None = None,
) -> Learner:
    """Build the learner a spec describes, checking every parameter.

    ``labels`` and ``size`` are the context parameters; when either is given, the spec
    must not set any of :data:`CONTEXT_PARAMS` (InvalidParameter names the one it sets).
    """
    cls = kind_of(spec)
    names = cls.param_names()
    params = {k: v for k, v in spec.items() if k != "kind"}
    unknown = sorted(set(params) - set(names))
    if unknown:
        raise InvalidParameter(
            unknown[0], params[unknown[0]], f"a parameter of {cls.kind}: one of {names}"
        )
    if labels is not None or size is not None:
        _refuse_context(cls, params)
    if labels is not None and "labels" in names:
        params.setdefault("labels", list(labels))
    if size is not None:
        key = size_name(cls.input_kind_for(params))
        if key in names:
            params.setdefault(key, size)
    defaults = cls.param_defaults()
    missing = [n for n in names if n not in params and n not in defaults]
    if missing:
        raise InvalidParameter(missing[0], None, f"a value (required by {cls.kind})")
    return cls(**params)


def _refuse_context(cls: type[Learner], params: Mapping[str, Any]) -> None:
    """Refuse the context parameters a spec sets when the caller supplies the context.

    A value the parameter could never take gets its usual message first.
    """
    given = [name for name in CONTEXT_PARAMS if name in params]
    if not given:
        return
    name, value = given[0], params[given[0]]
    constraint = cls._parameter_constraints.get(name)
    expected = constraint.check(value) if constraint else None
    raise InvalidParameter(
        name, value, expected or f"no {name} in this spec: the model supplies it"
    )


def from_state(doc: Any) -> Learner:
    """Rebuild a learner, with its learned state, from an exported state document."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("params"), Mapping):
        raise InvalidState("state: expected an object with params")
    try:
        learner = build(doc["params"])
    except InvalidParameter as exc:
        raise InvalidState(f"state.params: {exc}") from None
    learner.import_state(doc)
    return learner


def describe() -> list[dict[str, Any]]:
    """Every kind with its parameters, defaults and allowed values."""
    out = []
    for kind, cls in KINDS.items():
        defaults = cls.param_defaults()
        params = []
        for name in cls.param_names():
            constraint = cls._parameter_constraints.get(name)
            params.append(
                {
                    "name": name,
                    "required": name not in defaults and name not in CONTEXT_PARAMS,
                    "default": list(defaults[name])
                    if isinstance(defaults.get(name), tuple)
                    else defaults.get(name),
                    "expected": constraint.describe() if constraint else "",
                    "context": name in CONTEXT_PARAMS,
                }
            )
        doc = inspect.getdoc(cls) or ""
        out.append(
            {
                "kind": kind,
                "summary": doc.splitlines()[0] if doc else "",
                "input": getattr(cls, "input_kind", "learner"),
                "parameters": params,
            }
        )
    return out
