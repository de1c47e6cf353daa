"""Numbers that stay numbers: every kind, fed extreme finite parameters and values.

A learner either refuses what it cannot represent (InvalidParameter when it is built,
InvalidInstance when an instance is checked: the service's 422) or takes it and keeps
every score and every weight finite, and keeps learning: a mistake on an instance that
gives the update rule something to do updates, or the update is refused whole
(UpdateRefused, counted by the service), never skipped in silence.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Hashable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import registry
from models.core.instance import Experts, InvalidInstance
from models.core.learner import CONTEXT_PARAMS, Learner, Spec, SpecList, UpdateRefused
from models.core.params import VALUE_LIMIT, Bool, InvalidParameter, Options, Real, RealArray
from models.learners.weighted_majority import WeightedMajority

SIZE = 3
BINARY: tuple[Hashable, ...] = (1, -1)
CLASSES: tuple[Hashable, ...] = ("a", "b", "c")

#: Finite values at the edges of the float range and of the learners' bounds.
EDGES = [
    1.7e308, 1e308, 1e300, 1e281, 1e280, 1e250, 1e200, 1e101, VALUE_LIMIT, 1e50, 1e10, 100.0,
    64.0, 2.0, 1.5, 1.0, 0.5, 1e-10, 1e-100, 1e-300, 2.2250738585072014e-308, 5e-324, 0.0,
]  # fmt: skip


# The strategies below are built once for each set of arguments and then reused: hypothesis
# validates every strategy object it has not seen, which costs more than the drawing.


@functools.cache
def reals(extra: tuple[float, ...] = ()) -> st.SearchStrategy[float]:
    """Finite floats up to +-1.7e308, weighted toward the edges (and ``extra``)."""
    edges = st.sampled_from(EDGES + list(extra))
    return st.one_of(
        edges,
        edges.map(lambda v: -v),
        st.floats(-1.7e308, 1.7e308, allow_nan=False, allow_infinity=False),
        st.floats(-10.0, 10.0, allow_nan=False),
    )


def _edges_of(c: Real) -> tuple[float, ...]:
    """A Real constraint's own bounds and the floats just beyond them."""
    out: list[float] = []
    for b, away in ((c.low, -math.inf), (c.high, math.inf)):
        if b is not None:
            out += [b, math.nextafter(b, away), math.nextafter(b, -away)]
    return tuple(v for v in out if math.isfinite(v))


@functools.cache
def _parameter_values(kind: str, n: int) -> tuple[tuple[str, st.SearchStrategy[Any] | None], ...]:
    """``kind``'s own parameters, each with the values drawn for it at the edges (None for
    the nested and integer ones, left out)."""
    out: list[tuple[str, st.SearchStrategy[Any] | None]] = []
    for name, c in registry.KINDS[kind]._parameter_constraints.items():
        if name in CONTEXT_PARAMS:
            continue
        values: st.SearchStrategy[Any] | None = None
        if isinstance(c, Real):
            nulls = st.just(None) if c.optional else st.nothing()
            values = st.one_of(reals(_edges_of(c)), nulls)
        elif isinstance(c, Bool):
            values = st.booleans()
        elif isinstance(c, Options):
            values = st.sampled_from(c.choices)
        elif isinstance(c, RealArray):
            values = st.lists(reals(), min_size=1, max_size=n)
        out.append((name, values))
    return tuple(out)


@functools.cache
@st.composite
def params_of(draw: st.DrawFn, kind: str, n: int) -> dict[str, Any]:
    """Some of ``kind``'s own (non-nested, non-integer) parameters, drawn at the edges."""
    out: dict[str, Any] = {}
    for name, values in _parameter_values(kind, n):
        if draw(st.booleans()) and values is not None:
            out[name] = draw(values)
    return out


ATTRIBUTE_KINDS = ("winnow", "balanced-winnow", "perceptron", "alma")
EXPERT_KINDS = ("committee", "multiclass-winnow", "weighted-majority", "fusion")
CONVERTIBLE = ("perceptron", "alma", "balanced-winnow")
#: Kinds whose own update follows every mistake (the ``direction`` below).
BASIC = (*ATTRIBUTE_KINDS, *EXPERT_KINDS, "subexpert")


@functools.cache
@st.composite
def inner(draw: st.DrawFn, kinds: tuple[str, ...], n: int) -> dict[str, Any]:
    kind = draw(st.sampled_from(kinds))
    return {"kind": kind, **draw(params_of(kind, n))}


@functools.cache
def members(kinds: tuple[str, ...], n: int) -> st.SearchStrategy[list[dict[str, Any]]]:
    """One to three inner learners of ``kinds``."""
    return st.lists(inner(kinds, n), min_size=1, max_size=3)


POOLS = st.sampled_from([ATTRIBUTE_KINDS, EXPERT_KINDS])


@functools.cache
@st.composite
def specs(draw: st.DrawFn, kind: str) -> tuple[dict[str, Any], tuple[Hashable, ...]]:
    """A spec of ``kind`` (its inner learners drawn too) and the labels to build it with."""
    spec: dict[str, Any] = {"kind": kind, **draw(params_of(kind, SIZE))}
    labels = CLASSES
    if kind in ATTRIBUTE_KINDS:
        labels = BINARY
    elif kind == "subexpert":
        spec["learner"] = draw(inner(CONVERTIBLE, SIZE))
    elif kind == "ecoc":
        spec["learner"] = draw(inner(ATTRIBUTE_KINDS, SIZE))
    elif kind in ("averaging", "recycling", "bagging", "boosting"):
        base = draw(inner(ATTRIBUTE_KINDS + EXPERT_KINDS, SIZE))
        spec["learner"] = base
        labels = BINARY if base["kind"] in ATTRIBUTE_KINDS else CLASSES
        if kind == "recycling":
            spec |= {"size": 4, "max_updates": 3}
    elif kind == "v-combine":
        pool = draw(POOLS)
        spec["learners"] = draw(members(pool, SIZE))
        spec["h"] = 2
        labels = BINARY if pool == ATTRIBUTE_KINDS else CLASSES
    elif kind == "vr-combine":
        spec |= {"size": 4, "max_updates": 2, "h": 2}
    return spec, labels


def values(unit: bool) -> st.SearchStrategy[float]:
    return st.one_of(st.just(0.0), st.just(1.0), reals(), st.floats(0.0, 1.0) if unit else reals())


@functools.cache
def instances(attributes: bool, unit: bool) -> st.SearchStrategy[Any]:
    """Raw attribute mappings, or raw lists of sub-expert votes, of ``values(unit)``."""
    if attributes:
        return st.dictionaries(st.integers(0, SIZE - 1), values(unit), max_size=SIZE)
    k = len(CLASSES)
    return st.lists(st.lists(values(unit), min_size=k, max_size=k), min_size=1, max_size=SIZE)


@functools.cache
@st.composite
def raw_instance(draw: st.DrawFn, attributes: bool) -> Any:
    unit = draw(st.booleans())  # mostly in [0, 1], or anything
    return draw(instances(attributes, unit))


@functools.cache
def trials(attributes: bool) -> st.SearchStrategy[list[tuple[Any, int, bool]]]:
    """The streams :func:`run` takes."""
    trial = st.tuples(raw_instance(attributes), st.integers(0, 5), st.booleans())
    return st.lists(trial, min_size=1, max_size=12)


def finite(a: Any) -> bool:
    return bool(np.isfinite(np.asarray(a, dtype=np.float64)).all())


def direction(learner: Learner, x: Any, y: int, predicted: int) -> bool:
    """Whether a mistake (``predicted`` for true class ``y``) gives the update rule of a
    basic learner something to do."""
    if learner.input_kind == "attributes":
        return bool(len(x.indices))
    assert isinstance(x, Experts)
    votes = x.dense(learner.input_size, learner.n_classes)
    if isinstance(learner, WeightedMajority):  # an expert that picked a wrong class
        voting = (votes != 0).any(axis=1)
        return bool((np.argmax(votes[voting], axis=1) != y).any())
    return bool((votes[:, y] != votes[:, predicted]).any())


def run(learner: Learner, stream: list[tuple[Any, int, bool]]) -> None:
    """Trials from ``stream``: (raw instance, label index, adversarial: the label is then
    the one ``index + 1`` after the prediction)."""
    k = learner.n_classes
    for raw, pick, adversarial in stream:
        try:
            x = learner.coerce(raw)
        except InvalidInstance:
            continue  # refused at encoding: the 422 path
        predicted, scores = learner.decide(x)
        assert finite(scores), (learner.spec(), scores)
        y = (predicted + 1 + pick % (k - 1)) % k if adversarial else pick % k
        try:
            predicted, updated = learner.trial(x, learner.labels[y])
            refused = False
        except UpdateRefused as exc:
            predicted, updated, refused = exc.predicted, False, True
        if learner.kind in BASIC and predicted != y and direction(learner, x, y, predicted):
            assert updated or refused, f"{learner.spec()}: a mistake that did not update"
        assert finite(learner.scores(x)), (learner.spec(), learner.scores(x))
        assert finite(learner.snapshot().scores(x))
    # the state is finite and valid: it exports and imports again
    doc = json.loads(json.dumps(learner.export_state()))
    again = registry.from_state(doc)
    assert again.counters() == learner.counters()


KINDS = list(registry.KINDS)


def test_every_kind_is_covered() -> None:
    assert set(KINDS) == {
        *BASIC,
        "averaging", "recycling", "v-combine", "vr-combine", "ecoc", "bagging", "boosting",
    }  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_extreme_numbers_are_refused_or_stay_finite(kind: str, data: st.DataObject) -> None:
    spec, labels = data.draw(specs(kind))
    size = SIZE
    try:
        learner = registry.build(spec, labels=list(labels), size=size)
    except InvalidParameter:
        return  # refused when built: the 422 path
    run(learner, data.draw(trials(learner.input_kind == "attributes")))


# -- long runs at the bounds ------------------------------------------------------------
# Every learner at the largest parameters it accepts, fed values at the edge of its range,
# each label the one it did not predict: every trial a mistake, for thousands of trials.

BIG = VALUE_LIMIT


def case(spec: dict[str, Any], labels: tuple[Hashable, ...], xs: list[Any], **kw: Any) -> Any:
    return pytest.param(spec, labels, xs, **{"id": spec["kind"], **kw})


AT_THE_BOUNDS = [
    case(
        {"kind": "perceptron", "eta": 1e50}, BINARY, [{0: BIG, 1: -BIG, 2: BIG}, {0: BIG, 1: BIG}]
    ),
    case(
        {"kind": "alma", "p": 64.0, "C": 100.0, "B": 1e100, "alma_alpha": 1e-100},
        BINARY,
        [{0: BIG, 1: 5e-324}, {1: -BIG}, {0: 5e-324, 2: -5e-324}],
    ),
    case(  # S passes through the subnormal floats as phi grows from nearly 0
        {"kind": "alma", "p": 64.0, "C": 1e-5},
        BINARY,
        [{0: 1.0}, {0: 1.0, 1: 1e-3}],
        id="alma-small-C",
    ),
    case(
        {
            "kind": "winnow",
            "alpha": 1e100,
            "theta_minus": -1e100,
            "theta_plus": 1e100,
            "init": 1e100,
        },
        BINARY,
        [{0: 1.0, 1: 1.0, 2: 1.0}, {0: 1e-3}, {1: 5e-324}],
    ),
    case(
        {"kind": "balanced-winnow", "alpha": 1.7e308, "theta": 0.5, "init_pos": 2.0**899},
        BINARY,
        [{0: 1.0, 1: 1.0}, {2: 0.5}],
    ),
    case(
        {"kind": "committee", "alpha": 1e200},
        CLASSES,
        [[[1, 0, 0], [0, 1, 0], [0, 0, 1]], [[1, 0, 1e-300], [0, 0, 0], [0.5, 0.5, 0]]],
    ),
    case(
        {"kind": "multiclass-winnow", "alpha": 1.7e308, "init": math.nextafter(1e280, 0)},
        CLASSES,
        [[[1, 0, 0], [0, 1, 0], [0, 0, 1]]],
    ),
    case(
        {"kind": "weighted-majority", "beta": 0.5},
        CLASSES,
        [[[1, 0, 0], [0, 1, 0], [0, 0, 1]]],
    ),
    case(
        {"kind": "subexpert", "learner": {"kind": "perceptron", "eta": 1e50}},
        CLASSES,
        [[[BIG, -BIG, 0], [0, BIG, -BIG], [5e-324, 0, BIG]]],
    ),
    case(
        {"kind": "averaging", "learner": {"kind": "perceptron", "eta": 1e50}},
        BINARY,
        [{0: BIG, 1: -BIG, 2: BIG}, {0: BIG, 1: BIG}],
    ),
]


@pytest.mark.parametrize(("spec", "labels", "xs"), AT_THE_BOUNDS)
def test_a_long_adversarial_run_at_the_bounds_stays_finite(
    spec: dict[str, Any], labels: tuple[Hashable, ...], xs: list[Any]
) -> None:
    learner = registry.build(spec, labels=list(labels), size=SIZE)
    run(learner, [(xs[t % len(xs)], t, True) for t in range(3000)])


# -- what is refused, and how it reads ----------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "labels", "name", "bound"),
    [
        ({"kind": "committee", "alpha": 1e308}, CLASSES, "alpha", "1e+200"),
        ({"kind": "perceptron", "eta": 1e308}, BINARY, "eta", "1e+50"),
        ({"kind": "alma", "C": 1e308}, BINARY, "C", "100"),
        ({"kind": "alma", "alma_alpha": 5e-324}, BINARY, "alma_alpha", "1e-100"),
        ({"kind": "winnow", "theta": 1e308}, BINARY, "theta", "1e+100"),
        ({"kind": "balanced-winnow", "init_pos": 1e308}, BINARY, "init_pos", "8.45"),
        ({"kind": "balanced-winnow", "theta": -1.7e308}, BINARY, "theta", "-1e+100"),
        ({"kind": "multiclass-winnow", "init": 1e300}, CLASSES, "init", "1e+280"),
        (
            {"kind": "multiclass-winnow", "init_weights": [1, 1e300, 1]},
            CLASSES,
            "init_weights",
            "1e+280",
        ),
        (
            {"kind": "subexpert", "learner": {"kind": "perceptron", "eta": 1e308}},
            CLASSES,
            "eta",
            "1e+50",
        ),
    ],
)
def test_a_parameter_beyond_its_bound_is_named_with_the_bound(
    spec: dict[str, Any], labels: tuple[Hashable, ...], name: str, bound: str
) -> None:
    with pytest.raises(InvalidParameter) as caught:
        registry.build(spec, labels=list(labels), size=SIZE)
    assert caught.value.name.split(".")[-1] == name
    assert bound in str(caught.value)


@pytest.mark.parametrize("kind", ["perceptron", "alma"])
def test_an_attribute_beyond_the_value_limit_is_refused_with_the_bound(kind: str) -> None:
    learner = registry.build({"kind": kind}, labels=list(BINARY), size=SIZE)
    learner.coerce({0: VALUE_LIMIT, 1: -VALUE_LIMIT})
    with pytest.raises(InvalidInstance, match=r"\[-1e\+100, 1e\+100\], got 1e\+308"):
        learner.coerce({0: 1e308})


def test_nested_specs_are_drawn_for_every_wrapper() -> None:
    """The nested constraint types this file fills in by hand are the only ones."""
    nested = {
        kind
        for kind, cls in registry.KINDS.items()
        if any(isinstance(c, Spec | SpecList) for c in cls._parameter_constraints.values())
    }
    assert nested == {
        "subexpert",
        "averaging",
        "recycling",
        "v-combine",
        "ecoc",
        "bagging",
        "boosting",
    }
