"""Parameter constraints, declared once per learner and checked by one helper.

Each learner lists its parameters in ``_parameter_constraints``: a mapping from the
parameter name to a :class:`Constraint`. :func:`validate_params` checks a learner's
stored parameters against them and raises :class:`InvalidParameter`, whose message names
the parameter, the value received and what was expected.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_SIZE",
    "VALUE_LIMIT",
    "Bool",
    "Constraint",
    "Integer",
    "InvalidParameter",
    "Labels",
    "Options",
    "Real",
    "RealArray",
    "validate_params",
]


#: The largest number of features or sub-experts a learner may be built for (2**26 weights
#: of 8 or 16 bytes: at most 1 GiB per learner).
MAX_SIZE = 2**26

#: The largest magnitude of an instance value a learner takes unless it declares a narrower
#: ``value_range``: a score sums at most MAX_SIZE products of a weight and a value, and each
#: learner bounds its parameters so that, for values within this, its weights and scores
#: stay finite over 2**64 updates (see each learner's notes).
VALUE_LIMIT = 1e100


class InvalidParameter(ValueError):
    """A learner parameter has a value outside what the learner accepts."""

    def __init__(self, name: str, value: Any, expected: str) -> None:
        self.name = name
        self.value = value
        self.expected = expected
        super().__init__(f"{name}={value!r} is invalid: expected {expected}")


class Constraint:
    """Base class: ``check`` returns None when the value fits, else what was expected."""

    optional: bool = False

    def check(self, value: Any) -> str | None:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - interface
        raise NotImplementedError


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class Real(Constraint):
    """A finite real number in an interval; ``None`` bounds are open-ended."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    optional: bool = False

    def describe(self) -> str:
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {self.low:g}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {self.high:g}")
        text = "a finite number" + (" " + " and ".join(parts) if parts else "")
        return text + (" or null" if self.optional else "")

    def check(self, value: Any) -> str | None:
        if value is None and self.optional:
            return None
        if not _is_number(value) or not math.isfinite(value):
            return self.describe()
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return self.describe()
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return self.describe()
        return None


@dataclass(frozen=True)
class Integer(Constraint):
    """An integer in a closed interval."""

    low: int | None = None
    high: int | None = None
    optional: bool = False

    def describe(self) -> str:
        parts = []
        if self.low is not None:
            parts.append(f">= {self.low}")
        if self.high is not None:
            parts.append(f"<= {self.high}")
        text = "an integer" + (" " + " and ".join(parts) if parts else "")
        return text + (" or null" if self.optional else "")

    def check(self, value: Any) -> str | None:
        if value is None and self.optional:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            return self.describe()
        if self.low is not None and value < self.low:
            return self.describe()
        if self.high is not None and value > self.high:
            return self.describe()
        return None


@dataclass(frozen=True)
class Bool(Constraint):
    def describe(self) -> str:
        return "true or false"

    def check(self, value: Any) -> str | None:
        return None if isinstance(value, bool) else self.describe()


@dataclass(frozen=True)
class Options(Constraint):
    """One of a fixed set of strings."""

    choices: tuple[str, ...]
    optional: bool = False

    def describe(self) -> str:
        text = "one of " + ", ".join(repr(c) for c in self.choices)
        return text + (" or null" if self.optional else "")

    def check(self, value: Any) -> str | None:
        if value is None and self.optional:
            return None
        return None if value in self.choices and isinstance(value, str) else self.describe()


@dataclass(frozen=True)
class Labels(Constraint):
    """A sequence of distinct label names (strings or integers), at least ``minimum`` long."""

    minimum: int = 2
    exactly: int | None = None

    def describe(self) -> str:
        if self.exactly is not None:
            return f"a list of exactly {self.exactly} distinct labels (strings or integers)"
        return f"a list of at least {self.minimum} distinct labels (strings or integers)"

    def check(self, value: Any) -> str | None:
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            return self.describe()
        if any(
            not isinstance(v, str | int) or isinstance(v, bool) or not isinstance(v, Hashable)
            for v in value
        ):
            return self.describe()
        if len(set(value)) != len(value) or len(value) < self.minimum:
            return self.describe()
        if self.exactly is not None and len(value) != self.exactly:
            return self.describe()
        return None


@dataclass(frozen=True)
class RealArray(Constraint):
    """An optional list of finite numbers, each >= ``low`` and < ``high``; its length is
    checked by the learner."""

    low: float | None = None
    optional: bool = True
    high: float | None = None

    def describe(self) -> str:
        parts = []
        if self.low is not None:
            parts.append(f">= {self.low:g}")
        if self.high is not None:
            parts.append(f"< {self.high:g}")
        bound = " each " + " and ".join(parts) if parts else ""
        return f"a list of finite numbers{bound}" + (" or null" if self.optional else "")

    def check(self, value: Any) -> str | None:
        if value is None and self.optional:
            return None
        if isinstance(value, str | bytes | Mapping):
            return self.describe()
        try:
            items = list(value)
        except TypeError:
            return self.describe()
        for v in items:
            if not _is_number(v) and not (hasattr(v, "dtype") and v.dtype.kind in "iuf"):
                return self.describe()
            f = float(v)
            if not math.isfinite(f) or (self.low is not None and f < self.low):
                return self.describe()
            if self.high is not None and f >= self.high:
                return self.describe()
        return None


def validate_params(
    constraints: Mapping[str, Constraint], params: Mapping[str, Any], prefix: str = ""
) -> None:
    """Check every parameter against its constraint; raise on the first that does not fit."""
    for name, constraint in constraints.items():
        value = params[name]
        expected = constraint.check(value)
        if expected is not None:
            raise InvalidParameter(prefix + name, value, expected)
