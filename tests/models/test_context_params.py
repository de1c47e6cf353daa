"""Context parameters (labels and the instance size) belong to the model a learner serves:
a spec that sets one, at any level, is refused when the context is given; and state
documents with impossible shapes are refused as invalid states."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from models import registry
from models.core.params import InvalidParameter
from models.core.state import InvalidState, decode_array

P, BW = {"kind": "perceptron"}, {"kind": "balanced-winnow"}
SE = {"kind": "subexpert", "learner": BW}


@pytest.mark.parametrize(
    ("spec", "name"),
    [
        ({"kind": "perceptron", "n_features": 8}, "n_features"),
        ({"kind": "committee", "labels": ["x", "y"]}, "labels"),
        (
            {"kind": "averaging", "learner": {"kind": "perceptron", "n_features": 8}},
            "learner.n_features",
        ),
        (
            {
                "kind": "averaging",
                "learner": {"kind": "recycling", "learner": {**P, "labels": [1, -1]}},
            },
            "learner.learner.labels",
        ),
        ({"kind": "subexpert", "learner": {**BW, "n_features": 3}}, "learner.n_features"),
        ({"kind": "subexpert", "learner": {**BW, "labels": [1, -1]}}, "learner.labels"),
        ({"kind": "ecoc", "learner": {**P, "n_features": 3}}, "learner.n_features"),
        (
            {"kind": "bagging", "learner": {"kind": "committee", "n_experts": 3}},
            "learner.n_experts",
        ),
        ({"kind": "v-combine", "learners": [P, {**P, "n_features": 3}]}, "learners[1].n_features"),
    ],
)
def test_a_spec_may_not_set_the_models_context(spec: dict[str, Any], name: str) -> None:
    with pytest.raises(InvalidParameter, match="the model supplies it") as info:
        registry.build(spec, labels=["a", "b"], size=4)
    assert info.value.name == name


def test_exported_states_still_rebuild() -> None:
    spec = {"kind": "averaging", "learner": {"kind": "recycling", "size": 3, "learner": SE}}
    learner = registry.build(spec, labels=["a", "b", "c"], size=4)
    for t in range(6):
        learner.learn(np.eye(4, 3)[np.roll(np.arange(4), t)], ["a", "b", "c"][t % 3])
    doc = learner.export_state()
    assert doc["params"]["labels"] == ["a", "b", "c"] and doc["params"]["n_experts"] == 4
    again = registry.from_state(doc)
    assert again.export_state() == doc


# -- state documents ---------------------------------------------------------------------------


def test_a_huge_shape_is_an_invalid_state() -> None:
    doc = {"dtype": "float64", "shape": [2**32, 2**32], "data": ""}  # 2**64 wraps to 0 in int64
    with pytest.raises(InvalidState, match="do not hold"):
        decode_array(doc, "w_", "float64")
