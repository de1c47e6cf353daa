"""Budgets of a learner spec: the byte estimate against the bytes measured on learners
trained until their buffers are full, and the checks of a spec's depth and learner count."""

from __future__ import annotations

import gc
import tracemalloc
import types
from typing import Any

import numpy as np
import pytest

from models import registry
from models.budget import ESTIMATORS, MAX_LEARNERS, check_spec, count_learners, estimate_bytes
from models.core.instance import Attributes, Experts
from models.core.learner import Learner
from models.core.params import InvalidParameter

P, BW = {"kind": "perceptron"}, {"kind": "balanced-winnow"}
SE = {"kind": "subexpert", "learner": BW}
#: Bytes the estimate may count beyond twice the measured ones, per learner object: the
#: fixed-size arrays it counts whether or not a given run creates them (the 1.5 KiB first
#: scratch of a learner driven by a compiled wrapper, ALMA's parameter row, a slot set
#: between two doublings). Twice the measured bytes covers a recycling store, which may
#: widen to 2m - 2 for instances of m non-zeros where dense ones give m.
SLACK = 2048


def _rb(inner: dict[str, Any], size: int) -> dict[str, Any]:
    return {"kind": "recycling", "size": size, "learner": inner}


def _ab(inner: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "averaging", "learner": inner}


def _vc(*learners: dict[str, Any], **params: Any) -> dict[str, Any]:
    return {"kind": "v-combine", "h": 4, "r": 10, "learners": list(learners), **params}


def _vr(**params: Any) -> dict[str, Any]:
    return {"kind": "vr-combine", "h": 4, "r": 10, "size": 8, **params}


#: (id, spec, label counts): every kind, nested wrappers, both instance forms, the compiled
#: and the reference V-Combine, and the VR-Combine preset with overrides.
SPECS: list[tuple[str, dict[str, Any], tuple[int, ...]]] = [
    ("winnow", {"kind": "winnow"}, (2,)),
    ("balanced-winnow", BW, (2,)),
    ("perceptron", P, (2,)),
    ("alma", {"kind": "alma", "p": 3.0}, (2,)),
    ("committee", {"kind": "committee"}, (2, 10)),
    ("multiclass-winnow", {"kind": "multiclass-winnow", "alpha": 0.1}, (2, 10)),
    ("weighted-majority", {"kind": "weighted-majority"}, (2, 10)),
    ("subexpert", {"kind": "subexpert", "learner": {"kind": "alma"}}, (2, 10)),
    ("recycling", _rb(P, 8), (2,)),
    ("recycling-committee", _rb({"kind": "committee"}, 8), (10,)),
    ("recycling-wm", _rb({"kind": "weighted-majority"}, 5), (10,)),
    ("averaging", _ab(BW), (2,)),
    ("averaging-recycling-subexpert", _ab(_rb(SE, 4)), (2, 10)),
    ("ecoc", {"kind": "ecoc", "learner": P}, (2, 10)),
    ("ecoc-recycling", {"kind": "ecoc", "code": "dense", "learner": _rb(P, 3)}, (10,)),
    ("bagging", {"kind": "bagging", "n_models": 3, "learner": SE}, (2, 10)),
    ("boosting", {"kind": "boosting", "n_models": 3, "learner": {"kind": "committee"}}, (10,)),
    ("v-combine-attributes", _vc(P, _ab(P)), (2,)),
    ("v-combine-experts", _vc({"kind": "committee"}, {"kind": "weighted-majority"}), (2, 10)),
    ("v-combine-ar-b", _vc(_rb(SE, 6), _ab(_rb(SE, 6))), (10,)),
    ("v-combine-l1", _vc(_rb(SE, 6), h=2, r=12, vote_normalize="l1"), (10,)),
    ("vr-combine-small", _vr(alphas=[1.1, 1.5], ps=[2.0, 4.0]), (2, 10)),
    (
        "vr-combine-wm",
        _vr(alphas=[1.2], ps=[], perceptron=False, select="weighted-majority", h=6, r=5),
        (10,),
    ),
    ("vr-combine", _vr(), (10,)),
]

_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, str, bytes)


def held_bytes(root: object) -> int:
    """Bytes of the numpy arrays reachable from ``root``, each buffer once (a view counts as
    the array that owns its memory). numba's typed lists are skipped: they hold views of
    arrays the learners hold themselves."""
    owners: dict[int, np.ndarray] = {}
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SKIP) or type(obj).__module__.startswith("numba"):
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            while isinstance(obj.base, np.ndarray):
                obj = obj.base
            owners[id(obj)] = obj
        else:
            stack.extend(gc.get_referents(obj))
    return sum(a.nbytes for a in owners.values())


def _labels(k: int) -> list[Any]:
    return [1, -1] if k == 2 else [f"c{j}" for j in range(k)]


def _train(learner: Learner, k: int, n: int, trials: int, nonzeros: int | None = None) -> None:
    """Dense instances (every attribute, or every sub-expert's vote for every class), or
    ``nonzeros`` of them, with values in (0, 1] and seeded labels."""
    rng = np.random.default_rng(7)
    labels = _labels(k)
    for _ in range(trials):
        if learner.input_kind == "attributes":
            v = rng.uniform(0.05, 1.0, n)
            x: Any = Attributes.from_dense(v)
        else:
            v = rng.uniform(0.05, 1.0, (n, k))
            if nonzeros is not None:
                v.flat[rng.permutation(v.size)[nonzeros:]] = 0.0
            x = Experts.from_dense(v)
        learner.learn(x, labels[int(rng.integers(k))])
        learner.predict(x)


@pytest.mark.parametrize(
    ("spec", "k", "n"),
    [
        pytest.param(spec, k, n, id=f"{name}-k{k}-n{n}")
        for name, spec, ks in SPECS
        for k in ks
        for n in (3, 24)
    ],
)
def test_estimate_bounds_the_measured_bytes(spec: dict[str, Any], k: int, n: int) -> None:
    learner = registry.build(spec, labels=_labels(k), size=n)
    _train(learner, k, n, trials=30)
    actual = held_bytes(learner)
    estimate = estimate_bytes(spec, labels=_labels(k), size=n)
    assert actual <= estimate <= 2 * actual + SLACK * count_learners(spec, labels=_labels(k))


@pytest.mark.parametrize(
    ("spec", "k", "n"),
    [
        pytest.param(_rb(P, 4), 2, 17, id="recycling"),
        pytest.param(_vc(_rb(SE, 6), _ab(_rb(SE, 6)), r=40), 3, 10, id="compiled-v-combine"),
    ],
)
def test_stores_widened_to_the_most_the_estimate_allows(
    spec: dict[str, Any], k: int, n: int
) -> None:
    """Instances of 1, 2, 3, 5, 9, then 17 non-zeros widen a store to 1, 2, 4, 8, 16, 32:
    2m - 2 for m = 17, the estimate's width, which it then bounds tightly."""
    learner, labels = registry.build(spec, labels=_labels(k), size=n), _labels(k)
    rng = np.random.default_rng(3)
    for m in (1, 2, 3, 5, 9, *[17] * 50):
        at = np.arange(m)
        x = (
            Attributes(at, rng.uniform(0.1, 1, m))
            if k == 2
            else Experts(at // k, at % k, rng.uniform(0.1, 1, m))
        )
        learner.learn(x, labels[int(rng.integers(k))])
    stores = [learner, *getattr(learner, "learners_", [])]
    assert {s.items_a_.shape[1] for s in stores if hasattr(s, "items_a_")} == {32}
    actual = held_bytes(learner)
    estimate = estimate_bytes(spec, labels=labels, size=n, max_nonzeros=17)
    assert actual <= estimate <= actual + SLACK * count_learners(spec)


def test_max_nonzeros_bounds_stored_instances() -> None:
    spec = {"kind": "vr-combine", "h": 4, "r": 10, "size": 8, "alphas": [1.1], "ps": [3.0]}
    labels, n = _labels(10), 200
    learner = registry.build(spec, labels=labels, size=n)
    _train(learner, 10, n, trials=30, nonzeros=40)
    actual = held_bytes(learner)
    sparse = estimate_bytes(spec, labels=labels, size=n, max_nonzeros=40)
    assert actual <= sparse <= 2 * actual + SLACK * count_learners(spec)
    assert sparse < estimate_bytes(spec, labels=labels, size=n) / 10


def test_every_kind_has_an_estimator() -> None:
    assert set(ESTIMATORS) == set(registry.KINDS)


def test_a_large_model_is_estimated_without_allocating() -> None:
    tracemalloc.start()
    try:
        huge = estimate_bytes({"kind": "vr-combine"}, labels=list(range(10)), size=2**20)
        largest = estimate_bytes({"kind": "winnow"}, labels=[1, -1], size=2**26)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert huge > 8 << 30 and largest == 8 * (2**26 + 7)  # w_ and the 7 kernel parameters


def test_estimate_names_a_bad_nested_value() -> None:
    spec = {"kind": "v-combine", "learners": [P, {"kind": "recycling", "size": "9", "learner": P}]}
    with pytest.raises(InvalidParameter) as info:
        estimate_bytes(spec, labels=[1, -1], size=4)
    assert info.value.name == "learners.1.size"


# -- check_spec ------------------------------------------------------------------------------


def _nested(depth: int) -> dict[str, Any]:
    spec: dict[str, Any] = P
    for _ in range(depth - 1):
        spec = {"kind": "averaging", "learner": spec}
    return spec


def test_depth_is_refused_where_it_passes_the_limit() -> None:
    check_spec(_nested(4), max_depth=4, max_learners=10)
    with pytest.raises(InvalidParameter) as info:
        check_spec(_nested(5), max_depth=4, max_learners=10)
    assert info.value.name == "learner.learner.learner.learner"


def test_a_very_deep_spec_is_refused_cleanly() -> None:
    with pytest.raises(InvalidParameter) as info:
        check_spec(_nested(10_000))
    assert info.value.name == ".".join(["learner"] * 8)
    with pytest.raises(InvalidParameter):
        estimate_bytes(_nested(10_000), labels=[1, -1], size=4)


@pytest.mark.parametrize(
    ("spec", "name"),
    [
        ({"kind": "v-combine", "learners": [P] * 1000}, f"learners.{MAX_LEARNERS - 1}"),
        ({"kind": "bagging", "n_models": 1000, "learner": P}, "learner"),
        ({"kind": "vr-combine", "alphas": [1.1 + j / 100 for j in range(60)]}, "alphas"),
        ({"kind": "v-combine", "learners": [P, {"kind": "vr-combine"}] * 3}, "learners.5.alphas"),
    ],
)
def test_too_many_learners_are_refused(spec: dict[str, Any], name: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        check_spec(spec)
    assert info.value.name == name


def test_the_vr_combine_preset_fits_with_margin() -> None:
    assert count_learners({"kind": "vr-combine"}) == 218
    assert MAX_LEARNERS > 2 * 218  # room for twice as many basic algorithms
    check_spec({"kind": "vr-combine"})
    check_spec({"kind": "ecoc", "learner": P}, labels=list(range(10)))
    with pytest.raises(InvalidParameter):  # without labels, the most any labels give
        check_spec({"kind": "ecoc", "learner": P})


@pytest.mark.parametrize(("name", "spec", "ks"), SPECS, ids=[s[0] for s in SPECS])
def test_count_is_the_learners_build_creates(
    monkeypatch: pytest.MonkeyPatch, name: str, spec: dict[str, Any], ks: tuple[int, ...]
) -> None:
    made = []
    original = Learner._initialise
    monkeypatch.setattr(Learner, "_initialise", lambda self: (made.append(1), original(self)))
    registry.build(spec, labels=_labels(ks[-1]), size=5)
    assert len(made) == count_learners(spec, labels=_labels(ks[-1]))
