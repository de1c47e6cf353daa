"""InputSpace: config, payload reading, the §1.3-1.4 numbering and the error messages."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import types
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.core.instance import Attributes, Experts, InvalidInstance
from models.core.learner import UnknownLabel
from models.core.params import InvalidParameter
from models.inputs.space import InputSpace

LABELS = ["spam", "ham", "eggs"]


def dense(space: InputSpace, payload: Any, form: str = "experts") -> np.ndarray:
    x = space.encode(payload, form)
    if form == "attributes":
        assert isinstance(x, Attributes)
        return x.dense(space.size(form))
    assert isinstance(x, Experts)
    return x.dense(space.size(form), space.n_classes)


def experts_space(normalize: str = "raw", **options: Any) -> InputSpace:
    return InputSpace(
        LABELS, experts={"expert_names": ["a", "b"], "normalize": normalize, **options}
    )


# -- attributes ------------------------------------------------------------------------


def test_dense_features_become_attributes() -> None:
    space = InputSpace([0, 1], attributes={"n_features": 4})
    x = space.encode({"features": [0.0, 1.0, 0.5, 0]}, "attributes")
    assert isinstance(x, Attributes)
    assert x.indices.tolist() == [1, 2] and x.values.tolist() == [1.0, 0.5]
    assert space.size("attributes") == 4
    assert space.forms == ("attributes", "experts")


def test_sparse_features_take_int_and_digit_keys() -> None:
    space = InputSpace([0, 1], attributes={"n_features": 10})
    x = space.encode({"features": {"7": 0.25, 2: 1, 5: 0}}, "attributes")
    assert x.indices.tolist() == [2, 7] and x.values.tolist() == [1.0, 0.25]


def test_numpy_features_are_copied_not_frozen() -> None:
    space = InputSpace([0, 1], attributes={"n_features": 3})
    arr = np.array([1.0, 0.0, 2.0])
    x = space.encode({"features": arr}, "attributes")
    assert x.dense(3).tolist() == [1.0, 0.0, 2.0]
    arr[0] = 5.0  # still writeable, and the instance did not change
    assert x.dense(3).tolist() == [1.0, 0.0, 2.0]


def test_constant_attribute_is_last_and_always_one() -> None:
    space = InputSpace([0, 1], attributes={"n_features": 3, "constant_attribute": True})
    assert space.size("attributes") == 4
    assert dense(space, {"features": [0, 2, 0]}, "attributes").tolist() == [0, 2, 0, 1]
    assert dense(space, {"features": {1: 2}}, "attributes").tolist() == [0, 2, 0, 1]
    assert dense(space, {}, "attributes").tolist() == [0, 0, 0, 1]
    assert space.describe_experts("attributes") == [
        "feature:0",
        "feature:1",
        "feature:2",
        "constant",
    ]


def test_absent_features_are_all_zero() -> None:
    space = InputSpace([0, 1], attributes={"n_features": 3})
    assert len(space.encode({}, "attributes")) == 0
    assert len(space.encode({"features": None}, "attributes")) == 0


def test_feature_names() -> None:
    space = InputSpace(["a", "b"], attributes={"feature_names": ["word:cheap", "price_high"]})
    x = dense(space, {"features": {"price_high": 0.5, "word:cheap": 1}}, "attributes")
    assert x.tolist() == [1.0, 0.5]
    assert dense(space, {"features": [0, 0.5]}, "attributes").tolist() == [0, 0.5]
    assert space.describe_experts("attributes") == ["feature:word:cheap", "feature:price_high"]
    assert space.feature_index("price_high") == 1


def _blake(name: str, seed: int, n: int) -> int:
    key = seed.to_bytes(8, "little")
    digest = hashlib.blake2b(name.encode(), digest_size=8, key=key).digest()
    return int.from_bytes(digest, "little") % n


def test_hashing_is_keyed_blake2b_and_stable() -> None:
    space = InputSpace([0, 1], attributes={"hashing": {"n_features": 1000, "seed": 7}})
    for name in ["word:cheap", "price_high", "ünïcode", ""]:
        assert space.feature_index(name) == _blake(name, 7, 1000)
    # pinned: a change of hash function silently scrambles every stored model
    assert _blake("word:cheap", 0, 1 << 20) == 586390
    default = InputSpace([0, 1], attributes={"hashing": {"n_features": 1 << 20}})
    assert default.feature_index("word:cheap") == 586390
    assert default.config()["attributes"]["hashing"] == {"n_features": 1 << 20, "seed": 0}
    seeds = {
        InputSpace(
            [0, 1], attributes={"hashing": {"n_features": 1 << 20, "seed": s}}
        ).feature_index("word:cheap")
        for s in range(4)
    }
    assert len(seeds) > 1
    assert space.describe_experts("attributes")[:2] == ["hash:0", "hash:1"]


def test_hash_collisions_add() -> None:
    space = InputSpace([0, 1], attributes={"hashing": {"n_features": 1, "seed": 0}})
    x = space.encode({"features": {"a": 0.25, "b": 0.5, "c": 1}}, "attributes")
    assert x.indices.tolist() == [0] and x.values.tolist() == [1.75]


def test_sparse_attributes_are_sorted_for_the_transform() -> None:
    space = InputSpace([0, 1], attributes={"feature_names": ["a", "b", "c"]})
    x = space.encode({"features": {"c": 1, "a": 0.5}}, "experts")
    assert x.expert.tolist() == [0, 1, 4, 5]


# -- expert votes and normalisation ----------------------------------------------------


def test_vote_forms() -> None:
    space = experts_space()
    got = dense(space, {"experts": {"a": {"ham": 0.7, "eggs": 0.1}, "b": [0.2, 0.3, 0.5]}})
    assert got.tolist() == [[0, 0.7, 0.1], [0.2, 0.3, 0.5]]
    assert dense(space, {"experts": {"b": "eggs"}}).tolist() == [[0, 0, 0], [0, 0, 1]]
    assert space.forms == ("experts",)
    assert space.size("experts") == 2


def test_missing_null_and_empty_votes_abstain() -> None:
    for normalize in ["raw", "sum-to-one", "rank", "argmax"]:
        space = experts_space(normalize)
        for payload in [{}, {"experts": {}}, {"experts": {"a": None, "b": {}}}]:
            assert not dense(space, payload).any()


def test_integer_labels_accept_json_string_keys() -> None:
    space = InputSpace([3, 7], experts={"expert_names": ["a", "b", "c"]})
    got = dense(space, {"experts": {"a": {"7": 0.5, 3: 0.25}, "b": 7, "c": "3"}})
    assert got.tolist() == [[0.25, 0.5], [0, 1], [1, 0]]
    assert space.class_of(7) == 1 and space.class_of("7") == 1
    with pytest.raises(UnknownLabel, match="unknown label 5"):
        space.class_of(5)
    with pytest.raises(UnknownLabel):
        space.class_of(True)


@pytest.mark.parametrize("labels", [[3, 7], ["cat", "7", "dog"], [0, 1]])
def test_classes_of_each_label_are_class_of_each(labels: list[Any]) -> None:
    """Labels looked up together find what class_of finds, and None where it refuses."""
    space = InputSpace(labels, experts={"expert_names": ["a"]})
    asked = [*labels, *map(str, labels), 5, "5", True, False, 1.0, 7.0, None, [7], "", np.int64(1)]
    expected: list[int | None] = []
    for y in asked:
        try:
            expected.append(space.class_of(y))
        except UnknownLabel:
            expected.append(None)
    got = space.classes_of(asked)
    assert len(got) == len(asked)
    for y, c, want in zip(asked, got, expected, strict=True):
        # None sends the caller to class_of, which may still take it (a numpy integer)
        plain = type(y) is int or type(y) is str
        assert c == want if plain else c is None, y
    assert any(c is None for c in got) and any(c is not None for c in got)


def test_sum_to_one() -> None:
    space = experts_space("sum-to-one")
    got = dense(space, {"experts": {"a": [2, 1, 1], "b": [0, 0, 0]}})
    assert got.tolist() == [[0.5, 0.25, 0.25], [0, 0, 0]]
    huge = dense(space, {"experts": {"a": [1e308, 1e308, 0]}})
    assert huge[0].tolist() == [0.5, 0.5, 0]
    with pytest.raises(InvalidInstance, match=r"experts\.a\[1\] is -0\.5: expected a score >= 0"):
        space.encode({"experts": {"a": [1, -0.5, 0]}}, "experts")
    with pytest.raises(InvalidInstance, match=r"experts\.b\.eggs is -1\.0"):
        space.encode({"experts": {"b": {"eggs": -1}}}, "experts")


def test_rank() -> None:
    space = experts_space("rank")
    got = dense(space, {"experts": {"a": [0.2, 0.5, 0.2], "b": "spam"}})
    assert got.tolist() == [[0.5, 1, 0.5], [1, 0.5, 0.5]]
    four = InputSpace([0, 1, 2, 3], experts={"expert_names": ["a"], "normalize": "rank"})
    got = dense(four, {"experts": {"a": [3, 1, 1, 0]}})
    assert got[0].tolist() == pytest.approx([1, 2 / 3, 2 / 3, 0])
    got = dense(four, {"experts": {"a": {"2": -1}}})  # missing labels score 0
    assert got[0].tolist() == [1, 1, 0, 1]


def test_argmax() -> None:
    space = experts_space("argmax")
    got = dense(space, {"experts": {"a": [0.2, 0.5, 0.5], "b": {"eggs": -1}}})
    assert got.tolist() == [[0, 1, 0], [1, 0, 0]]  # ties to the smallest class


# -- numbering: §1.4 transform, hybrids, threshold and split sub-experts ---------------


def test_attribute_transform_numbering() -> None:
    k, m = 3, 4
    space = InputSpace(LABELS, attributes={"n_features": m})
    assert space.size("experts") == m * k
    x = [0.5, 0.0, 1.0, 0.25]
    got = dense(space, {"features": x})
    for i in range(m):
        for c in range(k):
            row = np.zeros(k)
            row[c] = x[i]
            assert got[i * k + c].tolist() == row.tolist()
    # a linear-max learner with w[i*k + c] = W[c][i] is the linear machine s = W x
    rng = np.random.default_rng(0)
    W = rng.normal(size=(k, m))
    w = W.T.reshape(m * k)
    assert np.allclose(w @ got, W @ np.array(x))
    names = space.describe_experts("experts")
    assert names[: k + 1] == [
        "feature:0@label:spam",
        "feature:0@label:ham",
        "feature:0@label:eggs",
        "feature:1@label:spam",
    ]


def test_hybrid_numbering() -> None:
    space = InputSpace(
        LABELS,
        attributes={"feature_names": ["f", "g"], "constant_attribute": True},
        experts={
            "expert_names": ["a", "b"],
            "threshold_experts": True,
            "split_classes": ["eggs", "spam"],
        },
    )
    n, s, m, k = 2, 2, 3, 3
    assert space.size("experts") == n + n * s + m * k + k == 18
    names = space.describe_experts("experts")
    assert len(names) == 18
    assert names[:6] == [
        "expert:a",
        "expert:b",
        "expert:a@label:spam",
        "expert:a@label:eggs",
        "expert:b@label:spam",
        "expert:b@label:eggs",
    ]
    assert names[6:9] == ["feature:f@label:spam", "feature:f@label:ham", "feature:f@label:eggs"]
    assert names[12:] == [
        "constant@label:spam",
        "constant@label:ham",
        "constant@label:eggs",
        "threshold@label:spam",
        "threshold@label:ham",
        "threshold@label:eggs",
    ]
    assert space.expert_slots("a") == [0, 2, 3] and space.expert_slots("b") == [1, 4, 5]
    payload = {"features": {"g": 0.5}, "experts": {"a": [0.1, 0.2, 0.7], "b": "ham"}}
    got = dense(space, payload)
    expected = np.zeros((18, 3))
    expected[0] = [0.1, 0.2, 0.7]
    expected[1] = [0, 1, 0]
    expected[2, 0], expected[3, 2] = 0.1, 0.7  # a's pieces for spam and eggs
    expected[[9, 10, 11], [0, 1, 2]] = 0.5  # attribute g (index 1), one per class
    expected[[12, 13, 14], [0, 1, 2]] = 1  # the constant attribute
    expected[[15, 16, 17], [0, 1, 2]] = 1  # threshold experts
    assert got.tolist() == expected.tolist()
    with pytest.raises(InvalidParameter, match="form"):
        space.encode(payload, "attributes")
    with pytest.raises(InvalidParameter, match="form"):
        space.size("attributes")


def test_threshold_experts_always_vote() -> None:
    space = experts_space(threshold_experts=True)
    assert space.size("experts") == 5
    got = dense(space, {})
    assert got[2:].tolist() == np.eye(3).tolist() and not got[:2].any()


def test_split_all_uses_normalised_votes() -> None:
    space = experts_space("sum-to-one", split_classes="all")
    assert space.config()["experts"]["split_classes"] == "all"
    assert space.size("experts") == 2 + 2 * 3
    got = dense(space, {"experts": {"b": [1, 1, 2]}})
    assert got[1].tolist() == [0.25, 0.25, 0.5]
    assert got[5:8].tolist() == [[0.25, 0, 0], [0, 0.25, 0], [0, 0, 0.5]]
    assert not got[[0, 2, 3, 4]].any()


def test_empty_split_is_none() -> None:
    space = experts_space(split_classes=[])
    assert space.config()["experts"]["split_classes"] is None
    assert space.size("experts") == 2


# -- config --------------------------------------------------------------------------


def test_config_round_trip() -> None:
    config = {
        "labels": [0, 1, 2],
        "attributes": {"hashing": {"n_features": 64, "seed": 3}, "constant_attribute": True},
        "experts": {
            "expert_names": ["a", "b"],
            "normalize": "rank",
            "threshold_experts": True,
            "split_classes": ["2", 0],
        },
    }
    space = InputSpace.from_config(config)
    exported = space.config()
    assert json.loads(json.dumps(exported)) == exported
    assert exported["experts"]["split_classes"] == [0, 2]
    again = InputSpace.from_config(exported)
    assert again == space and again.config() == exported
    payload = {"features": {"x": 1, "y": 0.5}, "experts": {"a": [1, 2, 3], "b": 1}}
    assert dense(again, payload).tolist() == dense(space, payload).tolist()
    assert again.describe_experts("experts") == space.describe_experts("experts")
    exported["labels"].append(9)  # config() hands out copies
    assert space.config()["labels"] == [0, 1, 2]
    assert "InputSpace.from_config" in repr(space)


def test_defaults_are_exported() -> None:
    space = InputSpace(["x", "y"], attributes={"n_features": 2}, experts={"expert_names": ["a"]})
    assert space.config() == {
        "labels": ["x", "y"],
        "attributes": {"n_features": 2, "constant_attribute": False},
        "experts": {
            "expert_names": ["a"],
            "normalize": "raw",
            "threshold_experts": False,
            "split_classes": None,
        },
    }
    assert space != InputSpace(["x", "y"], attributes={"n_features": 3})


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"attributes": {"n_features": 2}}, "labels"),
        ({"labels": ["a"], "attributes": {"n_features": 2}}, "labels"),
        ({"labels": ["a", "a"], "attributes": {"n_features": 2}}, "labels"),
        ({"labels": [1, "1"], "attributes": {"n_features": 2}}, "labels"),
        ({"labels": [True, False], "attributes": {"n_features": 2}}, "labels"),
        ({"labels": ["a", "b"]}, "attributes"),
        ({"labels": ["a", "b"], "other": 1, "attributes": {"n_features": 2}}, "input.other"),
        ({"labels": ["a", "b"], "attributes": []}, "attributes"),
        ({"labels": ["a", "b"], "attributes": {}}, "attributes"),
        ({"labels": ["a", "b"], "attributes": {"n_features": 2, "hashing": {}}}, "attributes"),
        ({"labels": ["a", "b"], "attributes": {"n_features": 0}}, "attributes.n_features"),
        ({"labels": ["a", "b"], "attributes": {"n_features": True}}, "attributes.n_features"),
        ({"labels": ["a", "b"], "attributes": {"n_features": 2.0}}, "attributes.n_features"),
        ({"labels": ["a", "b"], "attributes": {"n_features": 2, "x": 1}}, "attributes.x"),
        (
            {"labels": ["a", "b"], "attributes": {"n_features": 2, "constant_attribute": 1}},
            "attributes.constant_attribute",
        ),
        ({"labels": ["a", "b"], "attributes": {"feature_names": []}}, "attributes.feature_names"),
        (
            {"labels": ["a", "b"], "attributes": {"feature_names": "ab"}},
            "attributes.feature_names",
        ),
        (
            {"labels": ["a", "b"], "attributes": {"feature_names": ["x", "x"]}},
            r"attributes.feature_names\[1\]",
        ),
        (
            {"labels": ["a", "b"], "attributes": {"feature_names": ["x", 3]}},
            r"attributes.feature_names\[1\]",
        ),
        ({"labels": ["a", "b"], "attributes": {"hashing": 8}}, "attributes.hashing"),
        ({"labels": ["a", "b"], "attributes": {"hashing": {}}}, "attributes.hashing.n_features"),
        (
            {"labels": ["a", "b"], "attributes": {"hashing": {"n_features": 8, "seed": -1}}},
            "attributes.hashing.seed",
        ),
        (
            {"labels": ["a", "b"], "attributes": {"hashing": {"n_features": 8, "salt": 1}}},
            "attributes.hashing.salt",
        ),
        ({"labels": ["a", "b"], "experts": {}}, "experts.expert_names"),
        ({"labels": ["a", "b"], "experts": {"expert_names": []}}, "experts.expert_names"),
        (
            {"labels": ["a", "b"], "experts": {"expert_names": ["e"], "normalize": "softmax"}},
            "experts.normalize",
        ),
        (
            {"labels": ["a", "b"], "experts": {"expert_names": ["e"], "threshold_experts": 0}},
            "experts.threshold_experts",
        ),
        (
            {"labels": ["a", "b"], "experts": {"expert_names": ["e"], "split_classes": "a"}},
            "experts.split_classes",
        ),
        (
            {"labels": ["a", "b"], "experts": {"expert_names": ["e"], "split_classes": ["c"]}},
            r"experts.split_classes\[0\]",
        ),
        (
            {
                "labels": ["a", "b"],
                "experts": {"expert_names": ["e"], "split_classes": ["a", "a"]},
            },
            r"experts.split_classes\[1\]",
        ),
        ({"labels": ["a", "b"], "experts": {"expert_names": ["e"], "x": 1}}, "experts.x"),
    ],
)
def test_config_errors_name_the_field(config: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidParameter, match=field):
        InputSpace.from_config(config)


# -- payload errors --------------------------------------------------------------------


@pytest.fixture
def hybrid() -> InputSpace:
    return InputSpace(
        ["spam", "ham"],
        attributes={"n_features": 10},
        experts={"expert_names": ["clf_a", "clf_b"]},
    )


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"features": [1, 2, 3, math.nan] + [0] * 6}, "features[3] is nan: expected a finite"),
        ({"features": [0] * 7}, "features has 7 values: expected 10"),
        ({"features": [True] + [0] * 9}, "features[0] is true: expected a finite number"),
        ({"features": ["1"] + [0] * 9}, "features[0] is '1': expected a finite number"),
        ({"features": [[1]] + [0] * 9}, "features[0] is a list: expected a finite number"),
        ({"features": [10**400] + [0] * 9}, "features[0] is"),
        ({"features": np.array([0.0, np.inf] + [0] * 8)}, "features[1] is inf"),
        ({"features": np.zeros(10, dtype=bool)}, "features[0] is false"),
        ({"features": {"3": math.inf}}, "features.3 is inf"),
        ({"features": {3: False}}, "features[3] is false"),
        ({"features": {3: None}}, "features[3] is null"),
        ({"features": {"3": 1, 3: 1}}, "features[3] is given twice"),
        ({"features": {10: 1}}, "features[10]: index out of range: expected 0 to 9"),
        ({"features": {-1: 1}}, "features[-1]: index out of range"),
        ({"features": {"x": 1}}, "features.x: expected a feature index"),
        ({"features": {1.0: 1}}, "features[1.0]: expected a feature index"),
        ({"features": "abc"}, "features is 'abc': expected a list of 10 numbers"),
        ({"experts": {"clf_x": "spam"}}, "experts.clf_x: unknown expert"),
        ({"experts": {3: "spam"}}, "experts[3]: unknown expert"),
        ({"experts": {"clf_a": {"spamm": 1}}}, "experts.clf_a.spamm: unknown label"),
        ({"experts": {"clf_a": "spamm"}}, "experts.clf_a is 'spamm': unknown label"),
        ({"experts": {"clf_a": [0, math.inf]}}, "experts.clf_a[1] is inf: expected a finite"),
        ({"experts": {"clf_a": [1, 2, 3]}}, "experts.clf_a has 3 scores: expected 2"),
        ({"experts": {"clf_a": {"ham": math.nan}}}, "experts.clf_a.ham is nan"),
        ({"experts": {"clf_a": {"ham": True}}}, "experts.clf_a.ham is true"),
        ({"experts": {"clf_a": [True, 0]}}, "experts.clf_a[0] is true"),
        ({"experts": {"clf_a": True}}, "experts.clf_a is true: expected a label"),
        ({"experts": {"clf_a": 1.5}}, "experts.clf_a is 1.5: expected a label"),
        ({"experts": ["spam"]}, "experts is a list: expected an object"),
        ({"label": "spam"}, "payload.label: unknown key"),
    ],
)
def test_payload_errors_name_the_field(hybrid: InputSpace, payload: Any, message: str) -> None:
    with pytest.raises(InvalidInstance) as info:
        hybrid.encode(payload, "experts")
    assert message in str(info.value)


def test_payload_errors_per_mode() -> None:
    names = InputSpace([0, 1], attributes={"feature_names": ["price_low", "price_high"]})
    with pytest.raises(InvalidInstance, match=r"features\.price_hi: unknown feature name"):
        names.encode({"features": {"price_hi": 1}}, "attributes")
    with pytest.raises(InvalidInstance, match=r"features\[3\]: expected a feature name"):
        names.encode({"features": {3: 1}}, "attributes")
    with pytest.raises(InvalidInstance, match="experts: this input has no experts"):
        names.encode({"experts": {"a": 0}}, "attributes")
    hashed = InputSpace([0, 1], attributes={"hashing": {"n_features": 8}})
    with pytest.raises(InvalidInstance, match=r"features is a list: expected an object"):
        hashed.encode({"features": [1, 2]}, "attributes")
    with pytest.raises(InvalidInstance, match=r"features\[3\]: expected a feature name"):
        hashed.encode({"features": {3: 1}}, "attributes")
    with pytest.raises(InvalidInstance, match=r"features\.x is null"):
        hashed.encode({"features": {"x": None}}, "attributes")
    with pytest.raises(InvalidInstance, match="hashed to index 0 sum to inf"):
        InputSpace([0, 1], attributes={"hashing": {"n_features": 1}}).encode(
            {"features": {"a": 1e308, "b": 1e308}}, "attributes"
        )
    only = experts_space()
    with pytest.raises(InvalidInstance, match="features: this input has no attributes"):
        only.encode({"features": [1]}, "experts")
    with pytest.raises(InvalidInstance, match="payload is a list"):
        only.encode([1], "experts")
    with pytest.raises(InvalidInstance, match=r"experts\.a\.1: label given twice"):
        InputSpace([0, 1], experts={"expert_names": ["a"]}).encode(
            {"experts": {"a": {1: 1, "1": 2}}}, "experts"
        )
    with pytest.raises(InvalidParameter, match="form"):
        only.encode({}, "matrix")


def test_encode_many_names_the_payload(hybrid: InputSpace) -> None:
    good = {"features": [0] * 10, "experts": {"clf_a": "ham"}}
    out = hybrid.encode_many([good, {}], "experts")
    assert len(out) == 2 and all(isinstance(x, Experts) for x in out)
    with pytest.raises(InvalidInstance, match=r"payload 1: experts\.clf_x: unknown expert"):
        hybrid.encode_many([good, {"experts": {"clf_x": 0}}], "experts")


def test_payload_is_not_mutated(hybrid: InputSpace) -> None:
    payload = {"features": {"3": 1, 1: 2}, "experts": {"clf_a": {"ham": 2}, "clf_b": [1, 0]}}
    before = copy.deepcopy(payload)
    hybrid.encode(payload, "experts")
    assert payload == before


# -- properties ------------------------------------------------------------------------

VALUES = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False), st.integers(-5, 5), st.sampled_from([0.0, 1.0])
)
NONNEG = st.one_of(st.floats(0, 1e6), st.integers(0, 5))


@st.composite
def space_configs(draw: st.DrawFn) -> dict[str, Any]:
    k = draw(st.integers(2, 4))
    labels = draw(
        st.sampled_from(
            [[f"l{i}" for i in range(k)], list(range(k)), [5 * i + 3 for i in range(k)]]
        )
    )
    config: dict[str, Any] = {"labels": labels}
    mode = draw(st.sampled_from(["none", "n_features", "feature_names", "hashing"]))
    if mode != "none":
        d = draw(st.integers(1, 5))
        section: dict[str, Any] = {
            "n_features": d,
            "feature_names": [f"f{i}" for i in range(d)],
            "hashing": {"n_features": d, "seed": draw(st.integers(0, 3))},
        }
        config["attributes"] = {mode: section[mode], "constant_attribute": draw(st.booleans())}
    if mode == "none" or draw(st.booleans()):
        split = draw(st.one_of(st.none(), st.just("all"), st.sets(st.sampled_from(labels))))
        config["experts"] = {
            "expert_names": [f"e{i}" for i in range(draw(st.integers(1, 3)))],
            "normalize": draw(st.sampled_from(["raw", "sum-to-one", "rank", "argmax"])),
            "threshold_experts": draw(st.booleans()),
            "split_classes": sorted(split, key=labels.index) if isinstance(split, set) else split,
        }
    return config


@st.composite
def payloads(draw: st.DrawFn, config: dict[str, Any]) -> dict[str, Any]:
    payload: dict[str, Any] = {}
    labels = config["labels"]
    attrs = config.get("attributes")
    if attrs is not None and draw(st.booleans()):
        if "n_features" in attrs:
            d = attrs["n_features"]
            keys = st.integers(0, d - 1).flatmap(lambda i: st.sampled_from([i, str(i)]))
            payload["features"] = draw(
                st.one_of(
                    st.lists(VALUES, min_size=d, max_size=d),
                    st.dictionaries(keys, VALUES).filter(
                        lambda m: len({int(key) for key in m}) == len(m)
                    ),
                )
            )
        elif "feature_names" in attrs:
            names = attrs["feature_names"]
            payload["features"] = draw(
                st.one_of(
                    st.lists(VALUES, min_size=len(names), max_size=len(names)),
                    st.dictionaries(st.sampled_from(names), VALUES),
                )
            )
        else:
            payload["features"] = draw(st.dictionaries(st.text(max_size=4), VALUES))
    experts = config.get("experts")
    if experts is not None and draw(st.booleans()):
        score = NONNEG if experts["normalize"] == "sum-to-one" else VALUES
        label_keys = st.sampled_from(labels).flatmap(
            lambda v: st.sampled_from([v, str(v)]) if isinstance(v, int) else st.just(v)
        )
        vote = st.one_of(
            st.none(),
            st.sampled_from(labels),
            st.lists(score, min_size=len(labels), max_size=len(labels)),
            st.dictionaries(label_keys, score).filter(
                lambda m: len({str(key) for key in m}) == len(m)
            ),
        )
        payload["experts"] = draw(st.dictionaries(st.sampled_from(experts["expert_names"]), vote))
    return payload


def _reference(space: InputSpace, config: dict[str, Any], payload: Any, form: str) -> np.ndarray:
    """The expected dense encoding, built the slow, obvious way from the documented rules."""
    labels = config["labels"]
    k = len(labels)
    attrs, experts = config.get("attributes"), config.get("experts")
    x: list[float] = []
    if attrs is not None:
        d = attrs.get("n_features") or len(attrs.get("feature_names", [])) or 0
        d = d or attrs["hashing"]["n_features"]
        x = [0.0] * d
        features = payload.get("features") or {}
        if isinstance(features, list):
            x = [float(v) for v in features]
        else:
            for key, v in features.items():
                if "n_features" in attrs:
                    x[int(key)] += v
                elif "feature_names" in attrs:
                    x[attrs["feature_names"].index(key)] += v
                else:
                    x[space.feature_index(key)] += v
        if attrs["constant_attribute"]:
            x.append(1.0)
    if form == "attributes":
        return np.array(x)
    rows: list[list[float]] = []
    if experts is not None:
        names = experts["expert_names"]
        votes: list[list[float] | None] = [None] * len(names)
        for name, vote in (payload.get("experts") or {}).items():
            if vote is None or vote == {}:
                continue
            if isinstance(vote, list):
                v = [float(s) for s in vote]
            elif isinstance(vote, dict):
                v = [0.0] * k
                for key, s in vote.items():
                    v[[str(label) for label in labels].index(str(key))] = float(s)
            else:
                v = [1.0 if label == vote else 0.0 for label in labels]
            mode = experts["normalize"]
            if mode == "sum-to-one" and sum(v) > 0:
                v = [s / sum(v) for s in v]
            elif mode == "rank":
                v = [(k - 1 - sum(u > s for u in v)) / (k - 1) for s in v]
            elif mode == "argmax":
                v = [1.0 if c == v.index(max(v)) else 0.0 for c in range(k)]
            votes[names.index(name)] = v
        rows += [v or [0.0] * k for v in votes]
        split = experts["split_classes"]
        split = [] if split is None else split
        chosen = range(k) if split == "all" else sorted(labels.index(s) for s in split)
        for v in votes:
            for c in chosen:
                rows.append([v[c] if v and j == c else 0.0 for j in range(k)])
    for xi in x:
        rows += [[xi if j == c else 0.0 for j in range(k)] for c in range(k)]
    if experts is not None and experts["threshold_experts"]:
        rows += np.eye(k).tolist()
    return np.array(rows).reshape(len(rows), k)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_random_valid_payloads_match_the_reference(data: st.DataObject) -> None:
    config = data.draw(space_configs())
    space = InputSpace.from_config(config)
    assert InputSpace.from_config(space.config()) == space
    payload = data.draw(payloads(config))
    for form in space.forms:
        got = space.encode(payload, form)
        assert got.size <= space.size(form)
        expected = _reference(space, config, payload, form)
        assert expected.shape[0] == space.size(form) == len(space.describe_experts(form))
        actual = dense(space, payload, form)
        np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-9)


BAD_NUMBERS = st.sampled_from([math.nan, math.inf, -math.inf, True, False, "1", None, [1], {}])


@st.composite
def corruptions(draw: st.DrawFn, config: dict[str, Any], payload: dict[str, Any]) -> Any:
    """A copy of a valid payload with exactly one thing wrong."""
    bad = copy.deepcopy(payload)
    attrs, experts = config.get("attributes"), config.get("experts")
    labels = config["labels"]
    choices = ["payload type", "extra key"]
    if attrs is None:
        choices.append("features without attributes")
    else:
        choices += ["bad feature value", "bad feature key"]
        if "hashing" not in attrs:
            choices.append("wrong length")
    if experts is None:
        choices.append("experts without experts")
    else:
        choices += ["unknown expert", "unknown label", "bad vote", "bad score", "score count"]
        if experts["normalize"] == "sum-to-one":
            choices.append("negative score")
    what = draw(st.sampled_from(choices))
    d = attrs and (
        attrs.get("n_features")
        or len(attrs.get("feature_names", []))
        or attrs["hashing"]["n_features"]
    )
    name = experts and experts["expert_names"][0]
    if what == "payload type":
        return draw(st.sampled_from([None, [1], "x", 3]))
    if what == "extra key":
        bad["label"] = labels[0]
    elif what == "features without attributes":
        bad["features"] = [1.0]
    elif what == "experts without experts":
        bad["experts"] = {"e0": labels[0]}
    elif what == "bad feature value":
        value = draw(BAD_NUMBERS)
        if attrs is not None and "hashing" in attrs:
            bad["features"] = {"w": value}
        elif draw(st.booleans()):
            bad["features"] = [0.0] * d
            bad["features"][draw(st.integers(0, d - 1))] = value
        else:
            key = 0 if "n_features" in attrs else attrs["feature_names"][0]
            bad["features"] = {key: value}
    elif what == "bad feature key":
        if "n_features" in attrs:
            key = draw(st.sampled_from([d, -1, "x", 1.5, str(d)]))
        elif "feature_names" in attrs:
            key = draw(st.sampled_from(["unknown!", 0, 1.5]))
        else:
            key = draw(st.sampled_from([0, 1.5, None]))
        bad["features"] = {key: 1.0}
    elif what == "wrong length":
        n = draw(st.integers(0, d + 3).filter(lambda n: n != d))
        bad["features"] = [0.0] * n
    elif what == "unknown expert":
        bad.setdefault("experts", {})["nobody"] = labels[0]
    elif what == "unknown label":
        vote = draw(st.sampled_from(["unknown!", 99, {"unknown!": 1.0}, {"99": 1.0}]))
        bad["experts"] = {name: vote}
    elif what == "bad vote":
        bad["experts"] = {name: draw(st.sampled_from([True, 1.5, math.nan, b"x", {1}]))}
    elif what == "bad score":
        value = draw(BAD_NUMBERS.filter(lambda v: v is not None))
        if draw(st.booleans()):
            bad["experts"] = {name: [0.0] * (len(labels) - 1) + [value]}
        else:
            bad["experts"] = {name: {labels[-1]: value}}
    elif what == "score count":
        n = draw(st.integers(0, len(labels) + 3).filter(lambda n: n != len(labels)))
        bad["experts"] = {name: [0.5] * n}
    elif what == "negative score":
        bad["experts"] = {name: [0.0] * (len(labels) - 1) + [-0.5]}
    return bad


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_random_invalid_payloads_raise_invalid_instance(data: st.DataObject) -> None:
    config = data.draw(space_configs())
    space = InputSpace.from_config(config)
    payload = data.draw(corruptions(config, data.draw(payloads(config))))
    for form in space.forms:
        with pytest.raises(InvalidInstance):
            space.encode(payload, form)


def encoded_or_error(space: InputSpace, votes: Any) -> Any:
    """What ``votes`` encode to (as lists), or the message of the error they raise."""
    try:
        x = space.encode({"experts": votes}, "experts")
    except InvalidInstance as e:
        return str(e)
    return (x.expert.tolist(), x.cls.tolist(), x.value.tolist())


MAPPING_KEYS = st.one_of(
    st.sampled_from(["l0", "l1", "l2", "0", "1", "2", "unknown!"]), st.integers(-1, 3)
)
MAPPING_SCORES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.booleans(),
    st.none(),
    st.just("1"),
)


@settings(max_examples=400, deadline=None)
@given(
    labels=st.sampled_from([["l0", "l1", "l2"], [0, 1, 2]]),
    votes=st.dictionaries(
        st.sampled_from(["e0", "e1", "e2"]),
        st.dictionaries(MAPPING_KEYS, MAPPING_SCORES, max_size=4),
    ),
    normalize=st.sampled_from(["raw", "sum-to-one", "rank", "argmax"]),
)
def test_score_mappings_read_in_one_pass_as_one_by_one(
    labels: list[Any], votes: dict[str, dict[Any, Any]], normalize: str
) -> None:
    """The one-pass reading of ``{label: score}`` votes gives what reading each vote on
    its own gives (a read-only mapping takes that path): the same instance, or the same
    error naming the same field."""
    space = InputSpace(labels, experts={"expert_names": ["e0", "e1", "e2"], "normalize": normalize})

    one_by_one = {name: types.MappingProxyType(vote) for name, vote in votes.items()}
    assert encoded_or_error(space, votes) == encoded_or_error(space, one_by_one)


@st.composite
def full_mappings(draw: st.DrawFn, labels: list[Any]) -> dict[Any, Any]:
    """A score for every label (as deployed classifiers post them), the keys in class
    order or not, as strings or (for integer labels) not, the scores now and then bad."""
    keys = [str(lab) for lab in labels]
    if draw(st.booleans()):
        keys = draw(st.permutations(keys))
    if isinstance(labels[0], int) and draw(st.booleans()):
        keys = [int(k) for k in keys]
    scores = st.floats(-10, 10) if draw(st.booleans()) else MAPPING_SCORES
    return {k: draw(scores) for k in keys}


@settings(max_examples=300, deadline=None)
@given(data=st.data(), labels=st.sampled_from([["l0", "l1", "l2"], [0, 1, 2], [7, 3, 5]]))
def test_full_score_mappings_in_class_order_read_as_one_by_one(
    data: st.DataObject, labels: list[Any]
) -> None:
    """Votes giving every label a score in class order skip the label lookups: the same
    instance (or the same error) as reading each vote on its own."""
    normalize = data.draw(st.sampled_from(["raw", "sum-to-one", "rank", "argmax"]))
    names = ["e0", "e1", "e2"]
    space = InputSpace(labels, experts={"expert_names": names, "normalize": normalize})
    votes = {n: data.draw(full_mappings(labels)) for n in data.draw(st.permutations(names))}

    one_by_one = {name: types.MappingProxyType(vote) for name, vote in votes.items()}
    assert encoded_or_error(space, votes) == encoded_or_error(space, one_by_one)


@st.composite
def alike_votes(draw: st.DrawFn, labels: list[Any], names: list[str]) -> dict[Any, Any]:
    """Votes all of one form (lists of scores, or objects), as a fleet of classifiers
    posts them, now and then with something wrong: a wrong length, a bad score, an
    unknown expert or label, an empty object."""
    k = len(labels)
    score = st.floats(-10, 10) if draw(st.booleans()) else MAPPING_SCORES
    voters = draw(st.lists(st.sampled_from([*names, "nobody"]), unique=True, max_size=4))
    if not draw(st.booleans()):
        voters = [v for v in voters if v != "nobody"]
    if draw(st.booleans()):
        length = st.just(k) if draw(st.booleans()) else st.integers(0, k + 1)
        return {v: [draw(score) for _ in range(draw(length))] for v in voters}
    keys = st.sampled_from([*map(str, labels), "unknown!"])
    return {v: draw(st.dictionaries(keys, score, max_size=k)) for v in voters}


@settings(max_examples=400, deadline=None)
@given(data=st.data(), labels=st.sampled_from([["l0", "l1", "l2"], [0, 1, 2]]))
def test_votes_all_of_one_form_read_as_by_the_general_reading(
    data: st.DataObject, labels: list[Any]
) -> None:
    """Votes all lists or all objects are read in one pass: the same instance, or the
    same error, as the general reading of each vote (a read-only mapping of votes takes
    that path)."""
    normalize = data.draw(st.sampled_from(["raw", "sum-to-one", "rank", "argmax"]))
    names = ["e0", "e1", "e2"]
    space = InputSpace(labels, experts={"expert_names": names, "normalize": normalize})
    votes = data.draw(alike_votes(labels, names))

    assert encoded_or_error(space, votes) == encoded_or_error(space, types.MappingProxyType(votes))
