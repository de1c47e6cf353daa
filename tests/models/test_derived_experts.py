"""Several normalisations per classifier and subsets' averages, as sub-experts: each
encoded as a plain reference computation gives it, numbered stably as the space grows."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.core.params import InvalidParameter
from models.inputs.derived import BY, DERIVED_LIMIT, NORMALIZE
from models.inputs.space import InputSpace


def _normalised(v: list[float], mode: str) -> list[float]:
    """One vote under one normalisation, written out as the module docstring says."""
    k = len(v)
    if mode == "raw":
        return list(v)
    if mode == "sum-to-one":
        total = sum(v)
        return [x / total for x in v] if total > 0 else [0.0] * k
    if mode == "argmax":
        top = v.index(max(v))
        return [1.0 if c == top else 0.0 for c in range(k)]
    return [(k - 1 - sum(1 for y in v if y > x)) / (k - 1) for x in v]


def _reference(cfg: dict[str, Any], k: int, votes: dict[str, list[float]]) -> np.ndarray:
    """The dense (sub-expert x class) instance of ``votes`` (each a full score list), in
    the numbering of a space that never changed."""
    names = cfg["expert_names"]
    norms = cfg["normalize"] if isinstance(cfg["normalize"], list) else [cfg["normalize"]]
    rows: list[list[float]] = []
    for name in names:
        for norm in norms:
            rows.append(_normalised(votes[name], norm) if name in votes else [0.0] * k)
    combos = cfg.get("combinations")
    if combos:
        bys = combos["by"] if isinstance(combos["by"], list) else [combos["by"]]
        for size in range(2, min(combos["size"], len(names)) + 1):
            for members in itertools.combinations(names, size):
                for by in bys:
                    mode = norms[0] if by == "score" else "rank"
                    voters = [_normalised(votes[m], mode) for m in members if m in votes]
                    if not voters:
                        rows.append([0.0] * k)
                        continue
                    rows.append([sum(v[c] for v in voters) / len(voters) for c in range(k)])
    return np.array(rows)


def _as_sent(v: list[float], labels: list[str], form: int) -> Any:
    """A vote in one of the forms a client may send: a list, a mapping, a bare label."""
    if form == 0:
        return v
    if form == 1:
        return {lab: x for lab, x in zip(labels, v, strict=True) if x != 0.0}
    return labels[int(np.argmax(v))]


@st.composite
def _case(draw: st.DrawFn) -> tuple[dict[str, Any], int, list[dict[str, Any]], list[Any]]:
    n = draw(st.integers(2, 5))
    k = draw(st.integers(2, 4))
    norms = draw(st.lists(st.sampled_from(NORMALIZE), min_size=1, max_size=4, unique=True))
    cfg: dict[str, Any] = {
        "expert_names": [f"e{i}" for i in range(n)],
        "normalize": norms if draw(st.booleans()) or len(norms) > 1 else norms[0],
    }
    if draw(st.booleans()):
        by = draw(st.lists(st.sampled_from(BY), min_size=1, max_size=2, unique=True))
        cfg["combinations"] = {"size": draw(st.integers(2, n + 1)), "by": by}
    labels = [f"l{c}" for c in range(k)]
    score = st.sampled_from([0.0, 0.25, 0.5, 1.0, 3.0])
    payloads, full = [], []
    for _ in range(draw(st.integers(1, 6))):
        votes: dict[str, Any] = {}
        scores: dict[str, list[float]] = {}
        for name in cfg["expert_names"]:
            if draw(st.integers(0, 3)) == 0:
                continue  # abstains
            form = draw(st.integers(0, 2))
            v = draw(st.lists(score, min_size=k, max_size=k))
            if form == 2:  # a bare label: score 1 for it
                v = [1.0 if c == int(np.argmax(v)) else 0.0 for c in range(k)]
            votes[name] = _as_sent(v, labels, form)
            if votes[name] != {}:  # an empty mapping abstains
                scores[name] = v
        payloads.append({"experts": votes})
        full.append(scores)
    return cfg, k, payloads, full


@settings(max_examples=150, deadline=None)
@given(_case())
def test_each_normalisation_and_subset_encodes_as_the_reference_does(
    case: tuple[dict[str, Any], int, list[dict[str, Any]], list[Any]],
) -> None:
    cfg, k, payloads, full = case
    labels = [f"l{c}" for c in range(k)]
    space = InputSpace(labels, experts=cfg)
    size = space.size("experts")
    alone = [space.encode(p, "experts") for p in payloads]
    together = space.encode_each(payloads, "experts")
    for x, y, votes in zip(alone, together, full, strict=True):
        want = _reference(cfg, k, votes)
        assert want.shape == (size, k)
        np.testing.assert_allclose(x.dense(size, k), want, rtol=1e-12, atol=1e-15)
        assert not isinstance(y, Exception)
        np.testing.assert_array_equal(y.dense(size, k), x.dense(size, k))
        assert (np.diff(x.expert * k + x.cls) > 0).all()  # sorted by (sub-expert, class)
    names = space.describe_experts("experts")
    assert len(names) == size and len(set(names)) == size
    assert InputSpace.from_config({"labels": labels, "experts": space.config()["experts"]}) == space


def test_names_say_which_classifier_normalisation_and_subset() -> None:
    space = InputSpace(
        ["cat", "dog"],
        experts={
            "expert_names": ["cnn", "svm", "knn"],
            "normalize": ["raw", "rank"],
            "combinations": {"size": 2, "by": ["score", "rank"]},
        },
    )
    assert space.describe_experts("experts") == [
        "expert:cnn/raw",
        "expert:cnn/rank",
        "expert:svm/raw",
        "expert:svm/rank",
        "expert:knn/raw",
        "expert:knn/rank",
        "expert:cnn+svm/score",
        "expert:cnn+svm/rank",
        "expert:cnn+knn/score",
        "expert:cnn+knn/rank",
        "expert:svm+knn/score",
        "expert:svm+knn/rank",
    ]
    assert space.expert_slots("svm") == [2, 3]
    assert space.n_derived == 6


def test_one_normalisation_keeps_the_plain_numbering() -> None:
    plain = InputSpace(["a", "b"], experts={"expert_names": ["x", "y"], "normalize": "rank"})
    listed = InputSpace(["a", "b"], experts={"expert_names": ["x", "y"], "normalize": ["rank"]})
    payload = {"experts": {"x": [0.2, 0.8], "y": "a"}}
    assert plain.describe_experts("experts") == ["expert:x", "expert:y"]
    assert listed.describe_experts("experts") == ["expert:x", "expert:y"]
    a, b = plain.encode(payload, "experts"), listed.encode(payload, "experts")
    np.testing.assert_array_equal(a.dense(2, 2), b.dense(2, 2))
    assert plain.config()["experts"]["normalize"] == "rank"
    assert listed.config()["experts"]["normalize"] == ["rank"]


@pytest.mark.parametrize(
    ("experts", "field"),
    [
        ({"normalize": []}, "experts.normalize"),
        ({"normalize": ["raw", "raw"]}, "experts.normalize"),
        ({"normalize": ["raw", "softmax"]}, "experts.normalize[1]"),
        ({"combinations": {"size": 1}}, "experts.combinations.size"),
        ({"combinations": {"by": "score"}}, "experts.combinations.size"),
        ({"combinations": {"size": 2, "by": "mean"}}, "experts.combinations.by"),
        ({"combinations": {"size": 2, "by": ["rank", "rank"]}}, "experts.combinations.by"),
        ({"combinations": {"size": 2, "weights": 1}}, "experts.combinations"),
    ],
)
def test_a_bad_option_is_refused_naming_its_field(experts: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidParameter) as e:
        InputSpace(["a", "b"], experts={"expert_names": ["x", "y", "z"], **experts})
    assert e.value.name.startswith(field)


def test_the_budget_of_derived_experts_is_checked_before_any_is_made() -> None:
    names = [f"e{i}" for i in range(60)]
    combos = {"size": 3, "by": "score"}
    count = math.comb(60, 2) + math.comb(60, 3)  # 36,010
    space = InputSpace(["a", "b"], experts={"expert_names": names, "combinations": combos})
    assert space.n_derived == count
    with pytest.raises(InvalidParameter) as e:
        InputSpace(
            ["a", "b"],
            experts={"expert_names": names, "combinations": combos},
            max_derived_experts=count - 1,
        )
    assert e.value.name == "experts.combinations"
    assert "max_derived_experts" in str(e.value) and str(count) in str(e.value)
    huge = {"expert_names": [f"e{i}" for i in range(10_000)], "combinations": {"size": 40}}
    with pytest.raises(InvalidParameter, match=str(DERIVED_LIMIT)):
        InputSpace(["a", "b"], experts=huge)
    # every subset of 20,000 experts: refused once the count passes the limit, never
    # summed out (a number of 6,000 digits, after minutes)
    every = {"expert_names": [f"e{i}" for i in range(20_000)], "combinations": {"size": 20_000}}
    with pytest.raises(InvalidParameter, match="give more than 199990000"):
        InputSpace(["a", "b"], experts=every)


def test_a_new_classifier_brings_its_subsets_and_a_retired_one_silences_its_own() -> None:
    space = InputSpace(
        ["a", "b", "c"],
        experts={
            "expert_names": ["x", "y", "z"],
            "normalize": ["sum-to-one", "rank"],
            "combinations": {"size": 2},
        },
    )
    payload = {"experts": {"x": [0.2, 0.5, 0.3], "y": "b", "z": [0.6, 0.3, 0.1]}}
    before = space.encode(payload, "experts")
    grown = space.changed({"experts": {"add": ["w"], "retire": ["y"]}})
    names = grown.describe_experts("experts")
    # every old coordinate keeps its name; the new ones come after
    assert names[: space.size("experts")] == space.describe_experts("experts")
    assert names[space.size("experts") :] == [
        "expert:w/sum-to-one",
        "expert:w/rank",
        "expert:x+w/score",
        "expert:y+w/score",
        "expert:z+w/score",
    ]
    after = grown.encode({"experts": {"x": [0.2, 0.5, 0.3], "z": [0.6, 0.3, 0.1]}}, "experts")
    dense_before = before.dense(grown.size("experts"), 3)
    dense_after = after.dense(grown.size("experts"), 3)
    silent = [i for i, name in enumerate(names) if "y" in name.split(":")[1].split("/")[0]]
    assert silent and not dense_after[silent].any()  # y and every subset with it: silent
    # the rest of what x and z vote is what it was
    same = [i for i in range(space.size("experts")) if i not in silent]
    np.testing.assert_array_equal(dense_after[same], dense_before[same])
    with pytest.raises(Exception, match="retired"):
        grown.encode(payload, "experts")
    new = grown.encode({"experts": {"x": [1, 0, 0], "w": [0, 0, 1]}}, "experts")
    got = dict(zip(names, new.dense(grown.size("experts"), 3).tolist(), strict=True))
    assert got["expert:x+w/score"] == [0.5, 0.0, 0.5]
    assert got["expert:z+w/score"] == [0.0, 0.0, 1.0]  # z abstains: w alone
