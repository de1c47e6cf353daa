"""Input spaces that gain experts, features and labels, and retire experts: every old
coordinate keeps its meaning, in order, and what the change refuses it names."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.core.instance import InvalidInstance
from models.core.params import InvalidParameter
from models.inputs.space import InputSpace


@st.composite
def spaces(draw: Any) -> InputSpace:
    k = draw(st.integers(2, 4))
    labels = [f"c{j}" for j in range(k)]
    attributes = None
    if draw(st.booleans()):
        d = draw(st.integers(1, 4))
        attributes = {
            "feature_names": [f"f{i}" for i in range(d)],
            "constant_attribute": draw(st.booleans()),
        }
    experts = None
    if attributes is None or draw(st.booleans()):
        n = draw(st.integers(1, 4))
        split = draw(st.sampled_from([None, "all", labels[:1], labels[1:]]))
        experts = {
            "expert_names": [f"e{i}" for i in range(n)],
            "threshold_experts": draw(st.booleans()),
            "split_classes": split,
        }
    return InputSpace(labels, attributes=attributes, experts=experts)


@st.composite
def changes(draw: Any, space: InputSpace) -> dict[str, Any]:
    change: dict[str, Any] = {}
    if space.experts is not None and draw(st.booleans()):
        n = len(space.expert_names)
        change["experts"] = {"add": [f"new{n + i}" for i in range(draw(st.integers(1, 3)))]}
    if space.attributes is not None and draw(st.booleans()):
        d = len(space.attributes["feature_names"])
        change["features"] = {"add": [f"g{d + i}" for i in range(draw(st.integers(1, 3)))]}
    if not change or draw(st.booleans()):
        k = space.n_classes
        change["labels"] = {"add": [f"n{k + j}" for j in range(draw(st.integers(1, 2)))]}
    return change


@st.composite
def payloads(draw: Any, space: InputSpace) -> dict[str, Any]:
    """A payload of the space's own experts, features and labels."""
    out: dict[str, Any] = {}
    if space.attributes is not None:
        names = space.attributes["feature_names"]
        chosen = draw(st.lists(st.sampled_from(names), unique=True))
        out["features"] = {f: draw(st.sampled_from([0.25, 0.5, 1.0])) for f in chosen}
    if space.experts is not None:
        labels = list(space.labels)
        voters = draw(st.lists(st.sampled_from(list(space.expert_names)), unique=True))
        out["experts"] = {
            e: draw(
                st.one_of(
                    st.sampled_from(labels),
                    st.dictionaries(st.sampled_from(labels), st.sampled_from([0.2, 0.5, 1.0])),
                )
            )
            for e in voters
        }
    return out


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_no_coordinate_is_renumbered_and_old_payloads_encode_alike(data: Any) -> None:
    space = data.draw(spaces())
    for _ in range(data.draw(st.integers(1, 3))):  # a few changes in a row
        new = space.changed(data.draw(changes(space)))
        for form in space.forms:
            old_names = space.describe_experts(form)
            new_names = new.describe_experts(form)
            assert len(old_names) == space.size(form)
            assert len(new_names) == new.size(form) >= space.size(form)
            assert new_names[: len(old_names)] == old_names
            assert len(set(new_names)) == len(new_names)
            payload = data.draw(payloads(space))
            x, y = space.encode(payload, form), new.encode(payload, form)
            if form == "attributes":
                assert x.indices.tolist() == y.indices.tolist()
                assert x.values.tolist() == y.values.tolist()
                continue
            # the old coordinates hold what they held; new labels' sub-experts may vote
            old = (y.expert < space.size(form)) & (y.cls < space.n_classes)
            assert y.expert[old].tolist() == x.expert.tolist()
            assert y.cls[old].tolist() == x.cls.tolist()
            assert y.value[old].tolist() == x.value.tolist()
        assert InputSpace.from_config(new.config()) == new
        space = new


def _fusion() -> InputSpace:
    return InputSpace(
        ["cat", "dog"], experts={"expert_names": ["cnn", "svm"], "normalize": "sum-to-one"}
    )


def test_a_retired_expert_keeps_its_place_and_its_votes_are_refused() -> None:
    space = _fusion().changed({"experts": {"retire": ["svm"], "add": ["vit"]}})
    assert space.expert_names == ("cnn", "svm", "vit")
    assert space.retired == frozenset({"svm"})
    assert space.size("experts") == 3
    x = space.encode({"experts": {"cnn": "cat", "vit": {"dog": 2.0}}}, "experts")
    assert x.expert.tolist() == [0, 2]
    for vote in ("cat", None, [0.5, 0.5]):
        with pytest.raises(InvalidInstance, match=r"experts\.svm: a retired expert"):
            space.encode({"experts": {"cnn": "cat", "svm": vote}}, "experts")
    with pytest.raises(InvalidInstance, match="unknown expert"):
        space.encode({"experts": {"rf": "cat"}}, "experts")
    assert InputSpace.from_config(space.config()) == space


@pytest.mark.parametrize(
    ("change", "field", "why"),
    [
        ({"experts": {"add": ["cnn"]}}, r"experts\.add\[0\]", "an expert already"),
        ({"experts": {"add": ["old"]}}, r"experts\.add\[0\]", "a retired name"),
        ({"experts": {"retire": ["old"]}}, r"experts\.retire\[0\]", "retired already"),
        ({"experts": {"retire": ["rf"]}}, r"experts\.retire\[0\]", "not an expert"),
        ({"experts": {"add": ["a", "a"]}}, r"experts\.add\[1\]", "not already listed"),
        ({"experts": {"add": []}}, r"experts\.add", "non-empty list"),
        ({"experts": {"drop": ["cnn"]}}, "experts", "drop"),
        ({"features": {"add": ["f"]}}, "features", "named features"),
        ({"labels": {"add": ["dog"]}}, r"labels\.add\[0\]", "a new label"),
        ({"labels": {"add": [True]}}, r"labels\.add", "labels"),
        ({"labels": {"add": []}}, r"labels\.add", "non-empty list"),
        ({"colours": {}}, "change", "colours"),
    ],
)
def test_a_change_names_what_it_refuses(change: dict[str, Any], field: str, why: str) -> None:
    space = InputSpace(["cat", "dog"], experts={"expert_names": ["cnn", "old"], "retired": ["old"]})
    with pytest.raises(InvalidParameter, match=field) as info:
        space.changed(change)
    assert why in str(info.value)


def test_features_only_for_named_features_and_experts_only_with_experts() -> None:
    indexed = InputSpace([1, -1], attributes={"n_features": 3})
    with pytest.raises(InvalidParameter, match="only a model with named features"):
        indexed.changed({"features": {"add": ["x"]}})
    with pytest.raises(InvalidParameter, match="has no experts"):
        indexed.changed({"experts": {"add": ["x"]}})
    named = InputSpace([1, -1], attributes={"feature_names": ["a"], "constant_attribute": True})
    grown = named.changed({"features": {"add": ["b"]}})
    assert grown.describe_experts("attributes") == ["feature:a", "constant", "feature:b"]
    assert grown.encode({"features": {"b": 1.0}}, "attributes").indices.tolist() == [1, 2]
    assert grown.config()["generations"] == [[0, 1, 2], [0, 2, 2]]


def test_generations_that_do_not_add_up_are_refused() -> None:
    experts = {"expert_names": ["a", "b", "c"]}
    for bad in (
        [[2, 0, 2]],
        [[3, 0, 2], [3, 0, 2]],
        [[4, 0, 2], [3, 0, 2]],
        [[0, 0, 2], [3, 0, 2]],
        [[2, 0, 2], [3, 0, 2.0]],
        "x",
    ):
        with pytest.raises(InvalidParameter, match="generations"):
            InputSpace(["x", "y"], experts=experts, generations=bad)
    InputSpace(["x", "y"], experts=experts, generations=[[2, 0, 2], [3, 0, 2]])


def test_a_change_of_nothing_is_refused() -> None:
    with pytest.raises(InvalidParameter, match="names to add and/or retire"):
        _fusion().changed({"experts": {}})
