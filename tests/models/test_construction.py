"""How learners are made: kinds register themselves, constructors store their arguments
untouched, ``clone`` rebuilds from the parameters, and the compiled state is packed by name."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from models import registry
from models.core.learner import KINDS, Learner
from models.core.state import InvalidState
from models.kernels import families as fam
from models.learners.alma import ALMA
from models.learners.balanced import BalancedWinnow
from models.learners.committee import Committee
from models.learners.perceptron import Perceptron
from models.learners.winnow import Winnow
from models.wrappers.subexpert import SubExpert

#: The nested learners each kind needs, given as specs and as learner objects.
NESTED: dict[str, dict[str, Any]] = {
    "subexpert": {"learner": {"kind": "perceptron"}},
    "recycling": {"learner": {"kind": "committee"}},
    "averaging": {"learner": {"kind": "committee"}},
    "v-combine": {"learners": [{"kind": "committee"}, {"kind": "multiclass-winnow"}]},
    "ecoc": {"learner": {"kind": "perceptron"}},
    "bagging": {"learner": {"kind": "committee"}},
    "boosting": {"learner": {"kind": "committee"}},
}


def _arguments(cls: type[Learner]) -> dict[str, Any]:
    kwargs = dict(NESTED.get(cls.kind, {}))
    names = cls.param_names()
    attributes = cls.input_kind_for(kwargs) == "attributes"
    kwargs["labels"] = [1, -1] if attributes and cls.kind != "ecoc" else ["a", "b", "c"]
    kwargs["n_features" if attributes else "n_experts"] = 6
    return {k: v for k, v in kwargs.items() if k in names}


@pytest.mark.parametrize("kind", list(registry.KINDS))
def test_a_constructor_stores_its_arguments_untouched(kind: str) -> None:
    cls = registry.KINDS[kind]
    kwargs = _arguments(cls)
    learner = cls(**kwargs)
    defaults = cls.param_defaults()
    for name in cls.param_names():
        given = kwargs.get(name, defaults.get(name))
        if name == "labels":  # kept as an immutable copy: a caller's list cannot change it
            assert learner.labels == tuple(given)
        else:
            assert getattr(learner, name) is given, name


@pytest.mark.parametrize("kind", list(registry.KINDS))
def test_clone_rebuilds_an_untrained_learner_from_the_parameters(kind: str) -> None:
    learner = registry.KINDS[kind](**_arguments(registry.KINDS[kind]))
    twin = learner.clone()
    assert type(twin) is type(learner) and twin is not learner
    assert twin.spec() == learner.spec() and twin.counters()["trials"] == 0
    assert registry.build(learner.spec()).spec() == learner.spec()


def test_a_nested_learner_shows_in_the_spec_as_built_without_its_context() -> None:
    learner = registry.build(
        {"kind": "averaging", "learner": {"kind": "committee", "alpha": 1.5}},
        labels=["a", "b"],
        size=4,
    )
    assert learner.spec()["learner"] == {"kind": "committee", "alpha": 1.5}
    inner = Committee(n_experts=4, labels=["a", "b"], alpha=1.5)
    wrapped = registry.KINDS["averaging"](learner=inner, labels=["a", "b"], n_experts=4)
    assert wrapped.learner is inner
    assert wrapped.spec() == learner.spec()


def test_a_kind_registers_itself_once() -> None:
    class Probe(Committee):
        kind: ClassVar[str] = "probe-committee"  # type: ignore[misc]

    try:
        assert KINDS["probe-committee"] is Probe
        assert registry.build({"kind": "probe-committee"}, labels=["a", "b"], size=3)
        with pytest.raises(TypeError, match="probe-committee"):

            class Again(Committee):
                kind: ClassVar[str] = "probe-committee"  # type: ignore[misc]

    finally:
        del KINDS["probe-committee"]
    assert "probe-committee" not in registry.KINDS


def test_the_kind_table_is_in_the_documented_order() -> None:
    assert [cls.kind for cls in registry.ORDER] == list(registry.KINDS)
    assert [entry["kind"] for entry in registry.describe()] == list(registry.KINDS)


def test_parameters_are_packed_by_slot() -> None:
    assert fam.pack({1: 2.0, 0: 1.0}).tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="slots"):
        fam.pack({0: 1.0, 2: 3.0})
    with pytest.raises(ValueError, match="slots"):
        fam.pack({1: 1.0})


def test_each_basic_learner_names_its_family_and_parameters() -> None:
    winnow = Winnow(n_features=3, alpha=3.0, strict=True)
    family, _, _, P = winnow.kernel_state()
    assert family == fam.WINNOW and P[fam.WINNOW_STRICT] == 1.0
    assert P[fam.WINNOW_PROMOTE] == pytest.approx(np.log(3.0))
    family, _, _, P = Perceptron(n_features=3, eta=0.25).kernel_state()
    assert family == fam.PERCEPTRON and P[fam.PERCEPTRON_ETA] == 0.25
    family, _, _, P = ALMA(n_features=3, p=4.0, C=0.5).kernel_state()
    assert family == fam.ALMA and P[fam.ALMA_P] == 4.0 and P[fam.ALMA_C] == 0.5
    family, _, _, P = BalancedWinnow(n_features=3, theta=0.5).kernel_state()
    assert family == fam.BALANCED and P[fam.BALANCED_THETA] == 0.5
    family, _, _, P = Committee(n_experts=3, labels=["a", "b"], alpha=2.0).kernel_state()
    assert family == fam.COMMITTEE and P[fam.COMMITTEE_LOG_ALPHA] == pytest.approx(np.log(2.0))
    for runner_up, offset in (("predicted", fam.SUBEXPERT), ("runner_up", fam.SUBEXPERT_RUNNER_UP)):
        sub = SubExpert({"kind": "perceptron"}, 3, ["a", "b"], subexpert_z=runner_up)
        family = sub.kernel_state()[0]
        assert family == offset + fam.PERCEPTRON
        assert fam.base_family(family) == fam.PERCEPTRON


def test_v_combine_children_travel_as_every_wrapper_s_and_the_earlier_spelling_loads() -> None:
    spec = {"kind": "v-combine", "learners": [{"kind": "committee"}]}
    learner = registry.build(spec, labels=["a", "b"], size=4)
    rng = np.random.default_rng(0)
    for _ in range(40):
        x = np.eye(2)[rng.integers(0, 2, size=4)]
        learner.learn(x, "a" if x[:, 0].sum() >= 2 else "b")
    doc = learner.export_state()
    assert set(doc["children"]) == {"learner:0"}
    earlier = {**doc, "children": {"learner.0": doc["children"]["learner:0"]}}
    twin = learner.clone()
    twin.import_state(earlier)
    assert twin.export_state() == doc
    with pytest.raises(InvalidState, match="learner:0"):
        twin.import_state({**doc, "children": {"learner:1": doc["children"]["learner:0"]}})


def test_array_parameters_are_stored_untouched_too() -> None:
    weights = [1, 2, 3]
    learner = registry.KINDS["multiclass-winnow"](
        n_experts=3, labels=["a", "b"], init_weights=weights
    )
    assert learner.init_weights is weights and learner.weights().tolist() == [1.0, 2.0, 3.0]
    alphas = (1.5, 2)
    vr = registry.KINDS["vr-combine"](alphas=alphas, ps=(), labels=["a", "b"], n_experts=3)
    assert vr.alphas is alphas and vr.spec()["alphas"] == [1.5, 2.0]
