"""Explanations (models.explain): the parts of a score add up to the score the learner gives,
for every kind that has them; the other kinds are refused by name; explaining changes
nothing; answers name the model's inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.core.instance import Attributes, Experts
from models.core.learner import Learner
from models.explain import NotExplainable, describe, explain, explainable
from models.inputs.space import InputSpace
from models.learners.weighted_majority import WeightedMajority
from models.registry import build
from tests.models.conftest import CASES, Case

#: Outermost kinds whose scores are no sum over the inputs.
REFUSED = {"ecoc", "boosting", "v-combine", "vr-combine"}


def _refused(case: Case) -> bool:
    spec = case.spec
    if spec["kind"] == "bagging":
        return spec.get("vote", "majority") != "scores" or spec["learner"]["kind"] in REFUSED
    return spec["kind"] in REFUSED


def _trained(case: Case, n: int = 80, seed: int = 0) -> Learner:
    learner = case.build()
    for x, y in case.stream(n, seed):
        learner.learn(x, y)
    return learner


def _adds_up(learner: Learner, x: Any) -> None:
    e = explain(learner, x)
    scores = learner.scores(x)
    size = np.abs(e.contributions).sum(axis=1) + np.abs(e.constant)
    assert e.contributions.shape == (learner.n_classes, e.index.size)
    assert np.all(np.abs(e.totals() - scores) <= 1e-12 * size + 1e-300), (e.totals(), scores)


def test_every_kind_is_explained_or_refused(case: Case) -> None:
    learner = _trained(case)
    probes = [x for x, _ in case.stream(25, seed=1)]
    if _refused(case):
        with pytest.raises(NotExplainable) as got:
            explain(learner, probes[0])
        assert got.value.kind.startswith(case.kind)
        assert case.kind in str(got.value)
        return
    explainable(learner)
    for x in probes:
        _adds_up(learner, x)


def test_explaining_changes_nothing(case: Case) -> None:
    if _refused(case):
        pytest.skip("refused: see test_every_kind_is_explained_or_refused")
    learner = _trained(case, n=40)
    before = orjson.dumps(learner.export_state())
    x, _ = case.stream(1, seed=5)[0]
    predicted = learner.predict(x)
    explain(learner, x)
    assert orjson.dumps(learner.export_state()) == before
    assert learner.predict(x) == predicted


def test_the_active_inputs_are_explained() -> None:
    """Only the instance's active inputs have parts, in ascending order."""
    p = build({"kind": "perceptron"}, labels=[1, -1], size=6)
    p.learn({1: 1.0, 4: 0.5}, 1)
    e = explain(p, {4: 2.0, 1: 1.0})
    assert e.index.tolist() == [1, 4]
    assert e.contributions.tolist() == [[1.0, 1.0], [-1.0, -1.0]]
    c = build({"kind": "committee"}, labels=["a", "b", "c"], size=5)
    x = Experts([3, 0, 3], [2, 1, 0], [0.5, 1.0, 0.25])
    e = explain(c, x)
    assert e.index.tolist() == [0, 3]
    assert e.contributions.tolist() == [[0.0, 0.05], [0.2, 0.0], [0.0, 0.1]]


def test_a_threshold_is_the_constant() -> None:
    w = build({"kind": "winnow", "theta": 3.0}, labels=["yes", "no"], size=4)
    e = explain(w, [1, 1, 0, 0])
    assert e.constant.tolist() == [-3.0, 3.0]
    assert e.totals().tolist() == [-1.0, 1.0]
    thick = build({"kind": "winnow", "theta_minus": 1.0, "theta_plus": 3.0}, size=4)
    assert explain(thick, [1, 0, 0, 0]).constant.tolist() == [-2.0, 2.0]  # the midpoint


def test_weighted_majority_known_answer() -> None:
    """The docstring's example: after one trial the weights are (1, 0.5, 0.5); each expert
    gives its weight to the label it votes for, its top one where it splits its vote."""
    wm = WeightedMajority(n_experts=3, labels=[0, 1], beta=0.5)
    wm.learn(Experts.one_hot([0, 1, 1]), 0)
    e = explain(wm, [[1, 0], [0, 1], [0.4, 0.6]])
    assert e.contributions.tolist() == [[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]]
    assert e.totals().tolist() == wm.scores([[1, 0], [0, 1], [0.4, 0.6]]).tolist()
    tie = explain(wm, [[0.5, 0.5], [0, 0], [0, 0]])  # a tie goes to the first label
    assert tie.contributions.tolist() == [[1.0], [0.0]]


def test_averaging_explains_the_average() -> None:
    """The parts are the averaged weights', not the learner's current ones."""
    ab = build({"kind": "averaging", "learner": {"kind": "perceptron"}}, labels=[1, -1], size=2)
    ab.learn([1.0, 0.0], -1)  # B's hypothesis after it: w = (-1, 0)
    ab.learn([1.0, 0.0], 1)  # and after this one: w = (0, 0)
    e = explain(ab, [1.0, 0.0])
    assert e.contributions[0].tolist() == [-0.5]  # (-1 + 0) / 2, where B's own is 0
    assert ab.learner_.weights().tolist() == [0.0, 0.0]


def test_bagging_by_scores_adds_its_copies() -> None:
    spec = {"kind": "bagging", "learner": {"kind": "perceptron"}, "n_models": 3, "vote": "scores"}
    bag = build(spec, labels=[1, -1], size=3)
    rng = np.random.default_rng(3)
    for _ in range(30):
        x = rng.random(3)
        bag.learn(x, 1 if x[0] > 0.5 else -1)
    x = rng.random(3)
    total = sum(explain(m, x).contributions for m in bag.models_)
    assert np.allclose(explain(bag, x).contributions, total)


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"kind": "ecoc", "learner": {"kind": "perceptron"}}, "ecoc"),
        ({"kind": "bagging", "learner": {"kind": "perceptron"}}, "bagging"),
        ({"kind": "boosting", "learner": {"kind": "perceptron"}}, "boosting"),
        (
            {
                "kind": "bagging",
                "learner": {"kind": "ecoc", "learner": {"kind": "perceptron"}},
                "vote": "scores",
            },
            "bagging of ecoc",
        ),
    ],
)
def test_refusals_name_the_kind(spec: dict[str, Any], named: str) -> None:
    labels = ["a", "b", "c"] if "ecoc" in str(spec) else ["a", "b"]
    learner = build(spec, labels=labels, size=4)
    with pytest.raises(NotExplainable) as got:
        explain(learner, [1, 0, 0, 0])
    assert got.value.kind == named
    assert str(got.value).startswith(f"{named} predictions cannot be explained: ")


# -- property tests: random learned states, random instances ----------------------------

_EXPLAINED = [c for c in CASES if not _refused(c)]
_REAL = [c for c in _EXPLAINED if c.any_reals]


@settings(max_examples=40, deadline=None)
@given(
    case=st.sampled_from(_EXPLAINED),
    seed=st.integers(0, 2**16),
    trials=st.integers(0, 60),
    probe=st.integers(0, 2**16),
)
def test_parts_add_up_after_any_stream(case: Case, seed: int, trials: int, probe: int) -> None:
    learner = _trained(case, trials, seed)
    for x, _ in case.stream(5, probe):
        _adds_up(learner, x)


@settings(max_examples=25, deadline=None)
@given(case=st.sampled_from(_REAL), seed=st.integers(0, 2**16), probe=st.integers(0, 2**16))
def test_parts_add_up_with_real_values(case: Case, seed: int, probe: int) -> None:
    learner = case.build()
    for x, y in case.real_stream(40, seed):
        learner.learn(x, y)
    for x, _ in case.real_stream(5, probe):
        _adds_up(learner, x)


# -- named by the model's input ------------------------------------------------------------


def _sums(answer: dict[str, Any]) -> dict[str, float]:
    return {
        label: part["constant"] + sum(c["value"] for c in part["contributions"]) + part["rest"]
        for label, part in answer["labels"].items()
    }


def test_described_by_feature_names_with_the_constant_apart() -> None:
    space = InputSpace(
        ["spam", "ham"],
        attributes={"feature_names": ["a", "b", "c", "d"], "constant_attribute": True},
    )
    p = build({"kind": "perceptron"}, labels=space.labels, size=space.size("attributes"))
    for payload, y in [({"a": 1, "b": 1}, "spam"), ({"c": 1, "d": 0.5}, "ham")]:
        p.learn(space.encode({"features": payload}, "attributes"), y)
    x = space.encode({"features": {"a": 1.0, "c": 2.0, "d": 1.0}}, "attributes")
    answer = describe(explain(p, x), space, "attributes", top=1)
    spam = answer["labels"]["spam"]
    # w = (1, 1, -1, -0.5, 0): c gives -2, d -0.5, a 1; the constant attribute's weight is 0
    assert answer["kind"] == "perceptron"
    assert spam["contributions"] == [{"input": "feature:c", "value": -2.0}]
    assert spam["rest"] == 0.5
    assert spam["constant"] == 0.0
    assert _sums(answer) == dict(zip(["spam", "ham"], p.scores(x).tolist(), strict=True))


def test_described_by_experts_threshold_and_split_pieces() -> None:
    """Over sub-experts, a feature's and a split piece's coordinates are named without
    their label; the threshold sub-experts are the constant."""
    space = InputSpace(
        ["x", "y", "z"],
        attributes={"feature_names": ["f"]},
        experts={
            "expert_names": ["e1", "e2"],
            "threshold_experts": True,
            "split_classes": "all",
        },
    )
    c = build({"kind": "committee", "alpha": 1.5}, labels=space.labels, size=space.size("experts"))
    rng = np.random.default_rng(0)
    payloads = [
        {"features": {"f": float(rng.random())}, "experts": {"e1": "x", "e2": str(lab)}}
        for lab in rng.choice(["x", "y", "z"], 30)
    ]
    for p in payloads:
        c.learn(space.encode(p, "experts"), p["experts"]["e2"])
    x = space.encode(payloads[0], "experts")
    answer = describe(explain(c, x), space, "experts")
    scores = dict(zip(["x", "y", "z"], c.scores(x).tolist(), strict=True))
    assert _sums(answer) == pytest.approx(scores, rel=1e-12)
    names = {i["input"] for part in answer["labels"].values() for i in part["contributions"]}
    assert names <= {"expert:e1", "expert:e2", "feature:f"}
    assert "expert:e1" in {i["input"] for i in answer["labels"]["x"]["contributions"]}
    assert all(part["constant"] > 0 for part in answer["labels"].values())  # thresholds
    assert all(part["rest"] == 0.0 for part in answer["labels"].values())


def test_described_top_keeps_the_largest_and_sums_the_rest() -> None:
    space = InputSpace([1, -1], attributes={"n_features": 30})
    p = build({"kind": "perceptron"}, labels=space.labels, size=30)
    rng = np.random.default_rng(1)
    for _ in range(50):
        x = rng.normal(size=30)
        p.learn(x, 1 if x[:3].sum() > 0 else -1)
    x = Attributes.coerce(rng.normal(size=30))
    full = describe(explain(p, x), space, "attributes", top=30)
    some = describe(explain(p, x), space, "attributes", top=4)
    for label in ("1", "-1"):
        ranked = full["labels"][label]["contributions"]
        assert len(ranked) == 30 and some["labels"][label]["contributions"] == ranked[:4]
        magnitudes = [abs(i["value"]) for i in ranked]
        assert magnitudes == sorted(magnitudes, reverse=True)
        assert some["labels"][label]["rest"] == pytest.approx(sum(i["value"] for i in ranked[4:]))
    assert _sums(some) == pytest.approx(
        dict(zip(["1", "-1"], p.scores(x).tolist(), strict=True)), rel=1e-9, abs=1e-9
    )
