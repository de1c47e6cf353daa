"""The registry: build any kind from a spec, describe every kind, reject bad specs clearly."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import registry
from models.core.learner import Learner
from models.core.params import InvalidParameter

#: The parameters each kind needs beyond the context (labels and size).
MINIMAL = {
    "subexpert": {"learner": {"kind": "perceptron"}},
    "recycling": {"learner": {"kind": "perceptron"}},
    "averaging": {"learner": {"kind": "perceptron"}},
    "v-combine": {"learners": [{"kind": "perceptron"}]},
    "ecoc": {"learner": {"kind": "perceptron"}},
    "bagging": {"learner": {"kind": "perceptron"}},
    "boosting": {"learner": {"kind": "perceptron"}},
}


def _context(kind: str) -> dict[str, Any]:
    spec = {"kind": kind, **MINIMAL.get(kind, {})}
    attributes = registry.KINDS[kind].input_kind_for(spec) == "attributes"
    return {"labels": ["yes", "no"] if attributes else ["a", "b", "c"], "size": 6}


@pytest.mark.parametrize("kind", list(registry.KINDS))
def test_every_kind_builds_from_a_minimal_spec(kind: str) -> None:
    spec = {"kind": kind, **MINIMAL.get(kind, {})}
    ctx = _context(kind)
    learner = registry.build(spec, **ctx)
    assert isinstance(learner, Learner) and learner.kind == kind
    assert list(learner.labels) == ctx["labels"] and learner.input_size == 6
    full = learner.spec()
    assert json.loads(json.dumps(full, allow_nan=False)) == full
    assert registry.build(full).spec() == full  # the full spec needs no context
    with pytest.raises(InvalidParameter) as refused:  # the model owns the context
        registry.build(full, labels=["p", "q", "r"], size=99)
    assert refused.value.name == "labels"
    assert learner.counters() == {"trials": 0, "mistakes": 0, "updates": 0, "version": 0}


def test_required_parameters_are_the_minimal_ones() -> None:
    for entry in registry.describe():
        required = {p["name"] for p in entry["parameters"] if p["required"]}
        assert required == set(MINIMAL.get(entry["kind"], {})), entry["kind"]


def test_describe_lists_every_kind() -> None:
    described = registry.describe()
    json.dumps(described, allow_nan=False)
    assert [d["kind"] for d in described] == list(registry.KINDS)
    for entry in described:
        cls = registry.KINDS[entry["kind"]]
        assert entry["input"] in ("attributes", "experts", "learner")
        assert entry["summary"]
        names = [p["name"] for p in entry["parameters"]]
        assert names == cls.param_names()
        defaults = cls.param_defaults()
        for p in entry["parameters"]:
            assert set(p) >= {"name", "required", "default", "expected", "context"}
            assert isinstance(p["expected"], str) and p["expected"], (entry["kind"], p["name"])
            assert p["context"] == (p["name"] in registry.CONTEXT_PARAMS)
            if p["name"] in defaults:
                default = defaults[p["name"]]
                assert p["default"] == (list(default) if isinstance(default, tuple) else default)
                assert not p["required"]


def test_describe_defaults_are_valid() -> None:
    """Every documented default, used explicitly, builds."""
    for entry in registry.describe():
        spec = {"kind": entry["kind"], **MINIMAL.get(entry["kind"], {})}
        for p in entry["parameters"]:
            if not p["required"] and not p["context"]:
                spec[p["name"]] = p["default"]
        registry.build(spec, **_context(entry["kind"]))


# -- bad specs ---------------------------------------------------------------------------------

W, BW, SE = "winnow", "balanced-winnow", "subexpert"

BAD_SPECS: list[tuple[str, dict[str, Any], dict[str, Any], str, str]] = [
    # (id, spec, context, the parameter named, text in the message)
    ("unknown kind", {"kind": "nope"}, {}, "kind", "one of"),
    ("no kind", {"alpha": 2.0}, {}, "kind", "one of"),
    ("kind not a string", {"kind": 3}, {}, "kind", "one of"),
    ("unhashable kind", {"kind": ["winnow"]}, {}, "kind", "one of"),
    ("unknown parameter", {"kind": W, "gamma": 1.0}, {}, "gamma", "a parameter of winnow"),
    ("alpha=1 balanced", {"kind": BW, "alpha": 1}, {}, "alpha", "> 1"),
    ("alpha=1 winnow", {"kind": W, "alpha": 1.0}, {}, "alpha", "> 1"),
    ("beta=1.0 balanced", {"kind": BW, "beta": 1.0}, {}, "beta", "< 1"),
    ("beta=1.0 winnow", {"kind": W, "beta": 1.0}, {}, "beta", "< 1"),
    ("beta=1.0 wm", {"kind": "weighted-majority", "beta": 1.0}, {}, "beta", "< 1"),
    ("duplicate labels", {"kind": "committee"}, {"labels": ["a", "b", "a"]}, "labels", "distinct"),
    ("duplicate labels in spec", {"kind": BW, "labels": [1, 1]}, {}, "labels", "distinct"),
    ("one label", {"kind": "committee"}, {"labels": ["a"]}, "labels", "at least 2"),
    ("three labels binary", {"kind": BW}, {"labels": [1, 2, 3]}, "labels", "exactly 2"),
    ("bool label", {"kind": "committee"}, {"labels": [True, False]}, "labels", "strings or"),
    ("labels a string", {"kind": BW, "labels": "ab"}, {}, "labels", "list"),
    ("labels a number", {"kind": BW, "labels": 5}, {}, "labels", "list"),
    ("bool alpha", {"kind": "committee", "alpha": True}, {}, "alpha", "finite number"),
    ("bool theta", {"kind": W, "theta": True}, {}, "theta", "finite number"),
    ("bool size", {"kind": "perceptron", "n_features": True}, {}, "n_features", "integer"),
    ("bool strict as 1", {"kind": W, "strict": 1}, {}, "strict", "true or false"),
    (
        "bool init_weights",
        {"kind": "multiclass-winnow", "init_weights": [True] * 6},
        {},
        "init_weights",
        "numbers",
    ),
    (
        "text init_weights",
        {"kind": "multiclass-winnow", "init_weights": ["1"] * 6},
        {},
        "init_weights",
        "numbers",
    ),
    (
        "scalar init_weights",
        {"kind": "multiclass-winnow", "init_weights": 5},
        {},
        "init_weights",
        "list",
    ),
    (
        "short init_weights",
        {"kind": "multiclass-winnow", "init_weights": [1.0]},
        {},
        "init_weights",
        "n_experts",
    ),
    (
        "negative init_weights",
        {"kind": "multiclass-winnow", "init_weights": [-1.0] * 6},
        {},
        "init_weights",
        ">= 0",
    ),
    ("NaN alpha", {"kind": "committee", "alpha": math.nan}, {}, "alpha", "finite"),
    ("inf alpha", {"kind": BW, "alpha": math.inf}, {}, "alpha", "finite"),
    ("text alpha", {"kind": BW, "alpha": "2"}, {}, "alpha", "finite number"),
    ("size 0", {"kind": "perceptron"}, {"size": 0}, "n_features", ">= 1"),
    ("float size", {"kind": "committee", "n_experts": 4.0}, {}, "n_experts", "integer"),
    ("huge size", {"kind": "perceptron", "n_features": 10**30}, {}, "n_features", "<="),
    ("p < 2", {"kind": "alma", "p": 1.5}, {}, "p", ">= 2"),
    ("alma_alpha 0", {"kind": "alma", "alma_alpha": 0.0}, {}, "alma_alpha", "> 0"),
    ("bad option", {"kind": W, "demotion": "halve"}, {}, "demotion", "'eliminate'"),
    (
        "bad update",
        {"kind": "weighted-majority", "update": "sometimes"},
        {},
        "update",
        "'on_mistake'",
    ),
    (
        "band reversed",
        {"kind": W, "theta_minus": 3.0, "theta_plus": 1.0},
        {},
        "theta_minus",
        "theta_plus",
    ),
    (
        "nested bad alpha",
        {"kind": SE, "learner": {"kind": BW, "alpha": 1}},
        {},
        "learner.alpha",
        "> 1",
    ),
    (
        "nested unknown",
        {"kind": SE, "learner": {"kind": BW, "gamma": 1}},
        {},
        "learner.gamma",
        "parameter",
    ),
    (
        "nested unknown kind",
        {"kind": SE, "learner": {"kind": "nope"}},
        {},
        "learner.kind",
        "one of",
    ),
    ("subexpert over winnow", {"kind": SE, "learner": {"kind": W}}, {}, "learner", "threshold-0"),
    (
        "subexpert over theta=1",
        {"kind": SE, "learner": {"kind": BW, "theta": 1}},
        {},
        "learner",
        "threshold-0",
    ),
    ("subexpert learner a number", {"kind": SE, "learner": 5}, {}, "learner", "learner spec"),
    ("subexpert without learner", {"kind": SE}, {}, "learner", "required"),
    (
        "subexpert z mode",
        {"kind": SE, "learner": {"kind": "perceptron"}, "subexpert_z": "best"},
        {},
        "subexpert_z",
        "'runner_up'",
    ),
]


@pytest.mark.parametrize(
    ("spec", "context", "name", "text"),
    [pytest.param(*row[1:], id=row[0]) for row in BAD_SPECS],
)
def test_bad_spec_is_rejected(
    spec: dict[str, Any], context: dict[str, Any], name: str, text: str
) -> None:
    kind = spec.get("kind")
    ctx = _context(kind) if isinstance(kind, str) and kind in registry.KINDS else {}
    ctx.update(context)
    with pytest.raises(InvalidParameter) as info:
        registry.build(spec, **ctx)
    exc = info.value
    assert exc.name == name
    message = str(exc)
    assert message.startswith(name + "="), message
    assert text in message, message
    assert exc.expected and exc.expected in message


def test_message_shows_the_value() -> None:
    with pytest.raises(
        InvalidParameter, match=r"alpha=0\.5 is invalid: expected a finite number > 1"
    ):
        registry.build({"kind": "committee", "alpha": 0.5}, labels=[0, 1], size=3)


def test_build_does_not_fill_context_into_the_callers_spec() -> None:
    spec = {"kind": "subexpert", "learner": {"kind": "balanced-winnow"}}
    registry.build(spec, labels=[0, 1], size=4)
    assert spec == {"kind": "subexpert", "learner": {"kind": "balanced-winnow"}}


def test_subexpert_accepts_a_learner_object() -> None:
    inner = registry.build({"kind": "perceptron"}, labels=[1, -1], size=99)
    se = registry.build({"kind": "subexpert", "learner": inner}, labels=["a", "b"], size=4)
    assert se.spec()["learner"] == {"kind": "perceptron", "eta": 1.0}
    assert se.input_size == 4
    json.dumps(se.spec())


# -- random junk specs -----------------------------------------------------------------------------

_names = sorted({n for cls in registry.KINDS.values() for n in cls.param_names()})
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.integers().map(lambda i: i * 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from([*registry.KINDS, "", "multiply", "eliminate", "runner_up"]),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.sampled_from([*_names, "kind", "x"]), inner, max_size=4),
    ),
    max_leaves=12,
)


@st.composite
def junk_specs(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(_values)  # not even a mapping, usually
    spec: dict[str, Any] = {}
    kind = draw(st.one_of(st.sampled_from(list(registry.KINDS)), _values))
    if draw(st.integers(0, 9)) > 0:
        spec["kind"] = kind
    own = (
        registry.KINDS[kind].param_names()
        if isinstance(kind, str) and kind in registry.KINDS
        else _names
    )
    keys = st.one_of(st.sampled_from(own), st.sampled_from(own), st.text(max_size=6))
    spec.update(draw(st.dictionaries(keys, _values, max_size=4)))
    if spec.get("kind") == "subexpert" and draw(st.booleans()):
        inner_kind = draw(st.sampled_from(list(registry.KINDS)))
        inner_keys = st.sampled_from(registry.KINDS[inner_kind].param_names())
        spec["learner"] = {
            "kind": inner_kind,
            **draw(st.dictionaries(inner_keys, _values, max_size=3)),
        }
    return spec


#: The context comes from the serving model, not from the spec: plausible but unchecked.
_sizes = st.one_of(st.none(), st.integers(-3, 40), st.booleans())
_labels = st.one_of(
    st.none(),
    st.lists(st.one_of(st.integers(-3, 3), st.text(max_size=2)), max_size=5),
    st.lists(_scalars, max_size=4),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=junk_specs(), labels=_labels, size=_sizes)
def test_junk_specs_raise_invalid_parameter_or_build(spec: Any, labels: Any, size: Any) -> None:
    try:
        learner = registry.build(spec, labels=labels, size=size)
    except InvalidParameter as exc:
        assert isinstance(exc.name, str) and exc.expected
        return
    full = learner.spec()
    assert json.loads(json.dumps(full)) == full
    assert registry.build(full).spec() == full
