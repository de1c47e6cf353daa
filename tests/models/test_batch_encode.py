"""InputSpace.encode_each: many payloads at once, each exactly as encode gives it."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np
import pytest
from _same import assert_same_experts
from hypothesis import given, settings
from hypothesis import strategies as st

from models.core.instance import Attributes
from models.inputs.batch import dense_attributes, sparse_attributes
from models.inputs.space import NORMALIZE, InputSpace


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
def test_named_and_hashed_features_as_encode_gives_them(attributes: dict[str, Any]) -> None:
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


# -- expert votes --------------------------------------------------------------------


def assert_identical(got: Any, want: Any) -> None:
    """Errors of the same type and message; instances the same arrays, byte for byte."""
    if isinstance(want, Exception):
        assert type(got) is type(want) and str(got) == str(want)
        return
    assert_same_experts(got, want)


ODD_SCORES = [math.nan, math.inf, True, "0.5", None, 10**400, -1.0, np.float64(0.5), [1.0]]


@st.composite
def vote_spaces(draw: st.DrawFn) -> InputSpace:
    """A space of experts alone: string or integer labels, any normalisation, split
    classes or none, some experts retired, grown by later changes or not."""
    k = draw(st.integers(2, 5))
    labels: list[Any] = (
        [f"c{c}" for c in range(k)] if draw(st.booleans()) else list(range(10, 10 + k))
    )
    names = [f"e{i}" for i in range(draw(st.integers(1, 6)))]
    experts: dict[str, Any] = {
        "expert_names": names,
        "normalize": draw(st.sampled_from(NORMALIZE)),
        "split_classes": draw(st.sampled_from([None, "all", [labels[-1]]])),
    }
    space = InputSpace(labels, experts=experts)
    for _ in range(draw(st.integers(0, 2))):
        change: dict[str, Any] = {}
        if draw(st.booleans()):
            change["experts"] = {"add": [f"n{len(space.config()['experts']['expert_names'])}"]}
        else:
            change["labels"] = {"add": [f"z{len(space.labels)}"]}
        space = space.changed(change)
    voting = [n for n in space.config()["experts"]["expert_names"] if n not in space.retired]
    if len(voting) > 1 and draw(st.booleans()):
        space = space.changed({"experts": {"retire": [voting[0]]}})
    return space


@st.composite
def vote_batches(draw: st.DrawFn, space: InputSpace) -> list[Any]:
    """Payloads whose votes share one form more often than not, now and then with
    something odd in them (an unknown or retired expert, an unknown label, a bad score,
    a label given twice, a wrong count)."""
    labels = list(space.labels)
    k = len(labels)
    names = list(space.config()["experts"]["expert_names"])
    keys = [str(v) for v in labels]
    scores = st.one_of(
        st.sampled_from([0.0, -0.0, 1.0, 0.25, 2.0, 0.5]),
        st.floats(-3, 3, allow_nan=False),
        st.integers(-2, 3),
    )
    out: list[Any] = []
    batch_form = draw(st.sampled_from(["label", "list", "mapping", "some", "mixed"]))
    for _ in range(draw(st.integers(1, 10))):
        voters = draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))
        votes: dict[Any, Any] = {}
        for name in voters:
            form = batch_form
            if form == "mixed":
                form = draw(st.sampled_from(["label", "list", "mapping", "some"]))
            if form == "label":
                c = draw(st.integers(0, k - 1))
                votes[name] = labels[c] if draw(st.booleans()) else keys[c]
            elif form == "list":
                votes[name] = draw(st.lists(scores, min_size=k, max_size=k))
            elif form == "mapping":
                votes[name] = {key: draw(scores) for key in keys}
            else:
                chosen = draw(st.lists(st.integers(0, k - 1), unique=True, min_size=1))
                votes[name] = {keys[c]: draw(scores) for c in chosen}
        if votes and draw(st.integers(0, 9)) == 0:
            name = draw(st.sampled_from(list(votes)))
            odd = draw(st.sampled_from(["expert", "label", "score", "twice", "count", "none"]))
            vote = votes[name]
            if odd == "expert":
                votes[draw(st.sampled_from(["ghost", *space.retired]))] = vote
            elif odd == "label":
                votes[name] = "nope" if not isinstance(vote, dict) else {**vote, "nope": 1.0}
            elif odd == "score" and isinstance(vote, list | dict):
                bad = draw(st.sampled_from(ODD_SCORES))
                if isinstance(vote, list):
                    vote[0] = bad
                else:
                    vote[next(iter(vote))] = bad
            elif odd == "twice" and isinstance(vote, dict) and isinstance(labels[0], int):
                votes[name] = {**vote, labels[0]: 1.0, keys[0]: 2.0}
            elif odd == "count" and isinstance(vote, list):
                vote.append(1.0)
            elif odd == "none":
                votes[name] = draw(st.sampled_from([None, {}, []]))
        if draw(st.integers(0, 4)) == 0:  # the experts in another order
            votes = dict(reversed(list(votes.items())))
        out.append({"experts": votes})
    return out


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_expert_votes_together_are_each_as_encode_gives_it(data: st.DataObject) -> None:
    space = data.draw(vote_spaces())
    batch = data.draw(vote_batches(space))
    want = [outcome(space, p, "experts") for p in batch]
    for got, w in zip(space.encode_each(batch, "experts"), want, strict=True):
        assert_identical(got, w)
    for p, w in zip(batch, want, strict=True):  # and each alone
        assert_identical(space.encode_each([p], "experts")[0], w)


def test_plain_vote_batches_are_read_together() -> None:
    space = InputSpace(["a", "b", "c"], experts={"expert_names": ["x", "y"]})
    forms: list[Any] = [
        {"x": "b", "y": "a"},
        {"x": [0.5, 0.25, 0.0], "y": [1, 0, 2]},
        {"x": {"a": 0.5, "b": 0.25, "c": 0.0}, "y": {"a": 1.0, "b": 0.0, "c": 2.0}},
        {"y": {"c": 0.5}, "x": {"b": 1.0, "a": 0.25}},
    ]
    for votes in forms:
        batch = [{"experts": votes}, {"experts": {}}, {"experts": votes}]
        got = space._votes_each([p["experts"] for p in batch])
        assert got is not None  # read together, not one by one
        for x, p in zip(got, batch, strict=True):
            assert_identical(x, space.encode(p, "experts"))
    assert space._votes_each([{"x": "b", "y": [1.0, 0.0, 0.0]}]) is None  # forms mixed
    assert space._votes_each([{"x": "b"}, {"ghost": "b"}]) is None


# -- attributes in every form ----------------------------------------------------------


def assert_identical_attributes(got: Any, want: Any) -> None:
    if isinstance(want, Exception):
        assert type(got) is type(want) and str(got) == str(want)
        return
    assert_same(got, want)


@st.composite
def attribute_spaces(draw: st.DrawFn) -> InputSpace:
    """Indexed, named or hashed features (hashed into few places: names collide), with the
    constant or not, grown by later names or not."""
    constant = draw(st.booleans())
    if draw(st.booleans()):
        return InputSpace([0, 1], attributes={"n_features": 6, "constant_attribute": constant})
    if draw(st.booleans()):
        hashing = {"n_features": draw(st.sampled_from([3, 64])), "seed": draw(st.integers(0, 9))}
        return InputSpace([0, 1], attributes={"hashing": hashing, "constant_attribute": constant})
    names = ["a", "b", "c", "d"]
    space = InputSpace([0, 1], attributes={"feature_names": names, "constant_attribute": constant})
    for j in range(draw(st.integers(0, 2))):
        space = space.changed({"features": {"add": [f"new{j}"]}})
    return space


@st.composite
def attribute_batches(draw: st.DrawFn, space: InputSpace) -> list[Any]:
    attributes = space.config()["attributes"]
    if "hashing" in attributes:
        keys, d = ["a", "b", "c", "d", "e", "f", "gg", "ë"], attributes["hashing"]["n_features"]
    else:
        keys = attributes.get("feature_names") or [str(i) for i in range(attributes["n_features"])]
        d = len(keys)
    values = st.one_of(
        st.sampled_from([0.0, -0.0, 1.0, -2.5, 0.25]), st.integers(-3, 3), st.floats(-5, 5)
    )
    odd = st.sampled_from([math.nan, math.inf, True, "1", None, 10**400, np.float64(2.0)])
    out: list[Any] = []
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):
            f: Any = draw(st.lists(values, min_size=d, max_size=d))
            if draw(st.integers(0, 9)) == 0:
                f = draw(st.sampled_from([[*f, 1.0], f[:-1], [draw(odd), *f[1:]]]))
        else:
            f = {key: draw(values) for key in draw(st.lists(st.sampled_from(keys), unique=True))}
            if draw(st.integers(0, 9)) == 0:
                odd_keys = [
                    "zz",
                    "99",
                    "-1",
                    3,
                    keys[0],
                    "03",
                    "0" * 18 + "2",
                    "9" * 19,
                    "1,2",
                    "",
                    "\u0663",
                ]
                f[draw(st.sampled_from(odd_keys))] = draw(st.one_of(values, odd))
        out.append({"features": f} if draw(st.integers(0, 19)) else [f])
    return out


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_attributes_together_are_each_as_encode_gives_it(data: st.DataObject) -> None:
    space = data.draw(attribute_spaces())
    batch = data.draw(attribute_batches(space))
    for p, got in zip(batch, space.encode_each(batch, "attributes"), strict=True):
        assert_identical_attributes(got, outcome(space, p, "attributes"))


def test_named_and_dense_features_are_read_together() -> None:
    names = {"a": 0, "b": 1, "c": 2}
    rows: list[dict[Any, Any]] = [{"b": 2.0, "a": 0.0}, {}, {"c": -1, "a": 0.5}]
    got = sparse_attributes(rows, 3, True, names)
    space = InputSpace(
        [0, 1], attributes={"feature_names": list(names), "constant_attribute": True}
    )
    for row, x in zip(rows, got, strict=True):
        assert x is not None
        assert_same(x, space.encode({"features": row}, "attributes"))
    dense = [[0.0, 2.0, 0.0], [0, 0, 0], [1, -0.5, 3]]
    for row, x in zip(dense, dense_attributes(dense, 3, True), strict=True):
        assert x is not None
        assert_same(x, space.encode({"features": row}, "attributes"))
    assert dense_attributes([[1.0, 2.0], [1.0, 2.0, 3.0]], 3, False)[0] is None
    assert sparse_attributes([{"a": 1.0}, {"zz": 1.0}], 3, False, names)[1] is None


def test_hashed_features_land_where_their_keyed_hash_says() -> None:
    space = InputSpace([0, 1], attributes={"hashing": {"n_features": 5, "seed": 3}})
    key = (3).to_bytes(8, "little")
    names = [f"w{i}" for i in range(40)]
    place = {
        n: int.from_bytes(hashlib.blake2b(n.encode(), digest_size=8, key=key).digest(), "little")
        % 5
        for n in names
    }
    rows = [{n: float(i + 1) for i, n in enumerate(names[j : j + 7])} for j in range(0, 40, 7)]
    batch = [{"features": r} for r in rows]
    for encoded in (
        space.encode_each(batch, "attributes"),
        [space.encode(p, "attributes") for p in batch],
    ):
        for x, row in zip(encoded, rows, strict=True):
            want: dict[int, float] = {}
            for n, v in row.items():  # names hashed to one place add up
                want[place[n]] = want.get(place[n], 0.0) + v
            assert x.indices.tolist() == sorted(want)
            assert x.values.tolist() == [want[i] for i in sorted(want)]
