"""State documents: a learner's full state as plain JSON-able values, never pickle.

A document is a dict::

    {"format": "committee.state", "version": 1, "kind": ..., "params": {...},
     "counters": {...}, "arrays": {name: {"dtype": "float64", "shape": [n], "data": "<base64>"}},
     "children": {...}}

Arrays travel as little-endian bytes in base64 with their dtype and shape. Reading a
document validates everything: the format tag and version, every dtype against an allow
list, every shape against what the learner expects, byte counts, and finiteness.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "FORMAT",
    "VERSION",
    "InvalidState",
    "decode_array",
    "encode_array",
    "expect_keys",
    "same_spec",
]

FORMAT = "committee.state"
VERSION = 1

_DTYPES = {"float64": np.dtype("<f8"), "int64": np.dtype("<i8"), "bool": np.dtype("?")}


class InvalidState(ValueError):
    """A state document is malformed or does not match the learner reading it."""


def encode_array(a: np.ndarray) -> dict[str, Any]:
    name = a.dtype.name
    if name not in _DTYPES:
        raise TypeError(f"cannot encode arrays of dtype {name}")
    raw = np.ascontiguousarray(a, dtype=_DTYPES[name]).tobytes()
    return {"dtype": name, "shape": list(a.shape), "data": base64.b64encode(raw).decode("ascii")}


def decode_array(
    doc: Any, what: str, dtype: str, shape: tuple[int, ...] | None = None, finite: bool = True
) -> np.ndarray:
    """Decode one array, checking it has the expected dtype and (if given) shape.

    A -1 in ``shape`` accepts any length along that axis (for state that grows).
    """
    expect_keys(doc, what, {"dtype", "shape", "data"})
    if doc.get("dtype") != dtype:
        raise InvalidState(f"{what}: expected dtype {dtype}, got {doc.get('dtype')!r}")
    got_shape = doc.get("shape")
    if not isinstance(got_shape, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in got_shape
    ):
        raise InvalidState(f"{what}: shape must be a list of non-negative integers")
    if shape is not None and (
        len(got_shape) != len(shape)
        or any(want not in (-1, got) for want, got in zip(shape, got_shape, strict=True))
    ):
        raise InvalidState(f"{what}: expected shape {list(shape)}, got {got_shape}")
    data = doc.get("data")
    if not isinstance(data, str):
        raise InvalidState(f"{what}: data must be a base64 string")
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise InvalidState(f"{what}: data is not valid base64") from None
    dt = _DTYPES[dtype]
    count = math.prod(got_shape)
    if len(raw) != count * dt.itemsize:
        raise InvalidState(f"{what}: {len(raw)} bytes do not hold {count} values of {dtype}")
    arr = np.frombuffer(raw, dtype=dt).reshape(got_shape).astype(dt.newbyteorder("="))
    if finite and arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise InvalidState(f"{what}: contains non-finite values")
    return arr


def same_spec(stored: Any, current: Any) -> bool:
    """Whether a spec stored in a state document is ``current``, the spec of the learner
    reading it. A parameter added to a kind after the document was written is absent from
    it; it matches when the current value is null, the value that keeps the older behaviour
    (nested specs are compared the same way)."""
    if isinstance(stored, Mapping) and isinstance(current, Mapping):
        return set(stored) <= set(current) and all(
            same_spec(stored[k], v) if k in stored else v is None for k, v in current.items()
        )
    if isinstance(stored, list) and isinstance(current, list):
        return len(stored) == len(current) and all(map(same_spec, stored, current))
    return bool(stored == current)


def expect_keys(doc: Any, what: str, keys: set[str]) -> Mapping[str, Any]:
    """Check ``doc`` is a mapping holding exactly ``keys``."""
    if not isinstance(doc, Mapping):
        raise InvalidState(f"{what}: expected an object")
    got = set(doc.keys())
    if got != keys:
        missing, extra = sorted(keys - got), sorted(got - keys)
        raise InvalidState(f"{what}: missing {missing}, unexpected {extra}")
    return doc
