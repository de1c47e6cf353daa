"""The contract every drift detector keeps, and the checks of its input and state."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from models.core.instance import InvalidInstance
from models.core.params import VALUE_LIMIT, Constraint, validate_params
from models.core.state import InvalidState, expect_keys

__all__ = ["COUNT_LIMIT", "FORMAT", "VERSION", "DriftDetector", "count_at", "number_at"]

FORMAT = "committee.drift"
VERSION = 1

#: The largest value of an integer parameter (a float counts it exactly).
COUNT_LIMIT = 2**53

_NUMBERS = (float, int, np.floating, np.integer, np.bool_)


def _value(x: Any) -> float:
    """``x`` as a float, refused unless a finite number within VALUE_LIMIT."""
    if not isinstance(x, _NUMBERS):
        raise InvalidInstance(f"a drift detector takes a number, got {type(x).__name__}")
    value = float(x)
    if not abs(value) <= VALUE_LIMIT:
        raise InvalidInstance(f"x={x!r} is invalid: expected a finite number within 1e100")
    return value


def _values(xs: Any) -> np.ndarray:
    """``xs`` as a fresh one-dimensional float64 array, checked like :func:`_value`."""
    try:
        given = np.asarray(xs)
    except (TypeError, ValueError):
        raise InvalidInstance("a drift detector takes a sequence of numbers") from None
    if given.ndim != 1 or (given.size and given.dtype.kind not in "biuf"):
        raise InvalidInstance(
            f"a drift detector takes a one-dimensional sequence of numbers, got an array "
            f"of {given.ndim} dimensions and dtype {given.dtype}"
        )
    arr = np.array(given, dtype=np.float64)
    bad = np.flatnonzero(~(np.abs(arr) <= VALUE_LIMIT))
    if bad.size:
        at = int(bad[0])
        raise InvalidInstance(
            f"xs[{at}]={arr[at]!r} is invalid: expected a finite number within 1e100"
        )
    return arr


def number_at(doc: Mapping[str, Any], name: str, what: str) -> float:
    """``doc[name]`` of a state document, refused unless a finite number."""
    value = doc[name]
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise InvalidState(f"{what}.{name}: expected a finite number, got {value!r}")
    return float(value)


def count_at(doc: Mapping[str, Any], name: str, what: str, high: int) -> int:
    """``doc[name]`` of a state document, refused unless an integer in [0, high]."""
    value = doc[name]
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
        raise InvalidState(f"{what}.{name}: expected an integer in [0, {high}], got {value!r}")
    return value


class DriftDetector:
    """The contract of a detector: ``update`` one value (whether a drift fired there),
    ``update_many`` a stream (the indices where one fired), ``reset``, and a versioned
    state document of plain values."""

    kind: ClassVar[str]
    _parameter_constraints: ClassVar[dict[str, Constraint]]

    def _initialise(self) -> None:
        validate_params(self._parameter_constraints, self.get_params())
        self.reset()

    def get_params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._parameter_constraints}

    def clone(self) -> DriftDetector:
        """A fresh detector with the same parameters."""
        return type(self)(**self.get_params())

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def reset(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    @property
    def drift_detected(self) -> bool:  # pragma: no cover - interface
        """Whether the last update detected a drift."""
        raise NotImplementedError

    def update(self, x: float) -> bool:
        """Take the next value; whether a drift was detected at it."""
        return self._step(_value(x))

    def update_many(self, xs: Any) -> np.ndarray:
        """Take the values of ``xs`` in order; the indices (into ``xs``, int64) where a
        drift was detected, as :meth:`update` on each would have found them."""
        arr = _values(xs)
        fired = np.empty(arr.shape[0], dtype=np.int64)
        return fired[: self._run(arr, fired)].copy()

    def _step(self, x: float) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def _run(self, xs: np.ndarray, fired: np.ndarray) -> int:  # pragma: no cover - interface
        raise NotImplementedError

    def export_state(self) -> dict[str, Any]:
        """The whole state as a versioned document of plain values (JSON-able)."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "kind": self.kind,
            "params": self.get_params(),
            "state": self._export(),
        }

    def import_state(self, doc: Any) -> None:
        """Replace the state with the one in ``doc``, made by a detector of the same kind
        and parameters; raise InvalidState (and change nothing) when it does not fit."""
        doc = expect_keys(doc, "drift", {"format", "version", "kind", "params", "state"})
        version = doc["version"]
        if doc["format"] != FORMAT or type(version) is not int or version != VERSION:
            raise InvalidState(
                f"drift: expected format {FORMAT!r} version {VERSION}, "
                f"got {doc['format']!r} version {version!r}"
            )
        if doc["kind"] != self.kind or doc["params"] != self.get_params():
            raise InvalidState(
                f"drift: made by {doc['kind']!r} {doc['params']!r}, "
                f"not by {self.kind!r} {self.get_params()!r}"
            )
        self._import(doc["state"])

    def _export(self) -> dict[str, Any]:  # pragma: no cover - interface
        raise NotImplementedError

    def _import(self, doc: Any) -> None:  # pragma: no cover - interface
        raise NotImplementedError
