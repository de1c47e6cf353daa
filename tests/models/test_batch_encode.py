"""InputSpace.encode_each: many payloads at once, each exactly as encode gives it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from models.core.instance import Attributes
from models.inputs.space import InputSpace


def outcome(space: InputSpace, payload: Any, form: str) -> Any:
    try:
        return space.encode(payload, form)
    except ValueError as e:
        return e


def assert_same(got: Any, want: Any) -> None:
    """Errors of the same type and message; instances equal array for array."""
    if isinstance(want, Exception):
        assert type(got) is type(want) and str(got) == str(want)
        return
    assert type(got) is type(want)
    if isinstance(want, Attributes):
        for a, b in ((got.indices, want.indices), (got.values, want.values)):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
            assert not a.flags.writeable and a.flags.c_contiguous
        assert (got.size, got.low, got.high) == (want.size, want.low, want.high)
        assert type(got.size) is int and type(got.low) is float and type(got.high) is float
    else:
        assert (
            got.dense(want.size, want.n_classes).tolist()
            == want.dense(want.size, want.n_classes).tolist()
        )


ODD_FEATURES: list[Any] = [
    {"50": 1.0},  # out of range
    {"007": 1.0, "7": 2.0},  # the same index twice
    {"3": math.nan},
    {"3": math.inf},
    {5: 1.0, "6": 2.0},  # an int key
    {5: 1.0},
    {"x": 1.0},
    {"1,2": 1.0},  # a comma inside a key
    {"\u0661": 1.0},  # a digit, but not an ASCII one
    {" 3": 1.0},
    {"": 1.0},
    {"1" + "0" * 20: 1.0},  # too long for an index
    {"1": True},
    {"1": "2"},
    {"2": 10**400},
    {"2": 7, "4": -1},
    {"2": np.float32(0.5)},
    {},
    [0.0] * 50,
    None,
]


def payloads(rng: np.random.Generator, n: int) -> list[Any]:
    out: list[Any] = []
    for _ in range(n):
        keys = rng.integers(0, 50, int(rng.integers(0, 7)))
        f: Any = {str(j): float(rng.choice([0.0, -0.0, 1.0, -2.5, 3.0, 0.25])) for j in keys}
        if rng.random() < 0.25:
            odd = ODD_FEATURES[int(rng.integers(len(ODD_FEATURES)))]
            f = {**f, **odd} if isinstance(odd, dict) and rng.random() < 0.5 else odd
        p: dict[str, Any] = {"features": f}
        if rng.random() < 0.03:
            p["experts"] = None if rng.random() < 0.5 else {}
        out.append(p if rng.random() > 0.02 else [p])
    return out


@pytest.mark.parametrize("constant", [False, True])
@pytest.mark.parametrize("chunk", [1, 2, 7, 400])
def test_each_payload_as_encode_gives_it(constant: bool, chunk: int) -> None:
    space = InputSpace([1, -1], attributes={"n_features": 50, "constant_attribute": constant})
    items = payloads(np.random.default_rng(chunk), 400)
    for s in range(0, len(items), chunk):
        part = items[s : s + chunk]
        for p, got in zip(part, space.encode_each(part, "attributes"), strict=True):
            assert_same(got, outcome(space, p, "attributes"))


def test_plain_batch_and_every_odd_row_alone() -> None:
    space = InputSpace([1, -1], attributes={"n_features": 50})
    rng = np.random.default_rng(3)
    plain = [
        {"features": {str(j): 1.0 for j in rng.choice(50, 5, replace=False)}} for _ in range(50)
    ]
    for p, got in zip(plain, space.encode_each(plain, "attributes"), strict=True):
        assert_same(got, outcome(space, p, "attributes"))
    for odd in ODD_FEATURES:
        batch = [*plain[:3], {"features": odd}, *plain[3:6]]
        for p, got in zip(batch, space.encode_each(batch, "attributes"), strict=True):
            assert_same(got, outcome(space, p, "attributes"))


@pytest.mark.parametrize(
    "attributes",
    [
        {"feature_names": ["a", "b", "c"]},
        {"hashing": {"n_features": 4, "seed": 1}, "constant_attribute": True},
    ],
)
def test_other_modes_encode_one_by_one(attributes: dict[str, Any]) -> None:
    space = InputSpace(["x", "y"], attributes=attributes)
    items: list[Any] = [
        {"features": {"a": 1.0, "c": 2.0}},
        {"features": {"b": 0.5, "zz": 1.0}},
        {"features": {"0": 1.0}},
        {"features": [1.0, 2.0, 3.0]},
        {"features": None},
    ]
    for p, got in zip(items, space.encode_each(items, "attributes"), strict=True):
        assert_same(got, outcome(space, p, "attributes"))


def test_experts_form_encodes_one_by_one() -> None:
    space = InputSpace(["x", "y"], attributes={"n_features": 3}, experts={"expert_names": ["e"]})
    items: list[Any] = [
        {"features": {"0": 1.0}, "experts": {"e": "y"}},
        {"features": {"2": 0.5}},
        {"features": {"5": 1.0}},
        {"experts": {"ghost": "x"}},
    ]
    for p, got in zip(items, space.encode_each(items, "experts"), strict=True):
        assert_same(got, outcome(space, p, "experts"))
    with pytest.raises(ValueError, match="form"):
        space.encode_each(items, "attributes")


def test_the_callers_payloads_are_not_changed() -> None:
    space = InputSpace([1, -1], attributes={"n_features": 10, "constant_attribute": True})
    items = [{"features": {"3": 1.0, "1": 0.0}}, {"features": {"9": 2.0}}]
    before = repr(items)
    xs = space.encode_each(items, "attributes")
    assert repr(items) == before
    assert [x.indices.tolist() for x in xs] == [[3, 10], [9, 10]]  # type: ignore[union-attr]
