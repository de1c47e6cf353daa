"""State documents (STYLE.md #6): exact round trips, and every corruption rejected cleanly.

A corrupted document must raise :class:`~models.core.state.InvalidState`, never another
exception, and a failed import must leave the learner exactly as it was.
"""

from __future__ import annotations

import ast
import base64
import copy
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import models
from models import registry
from models.core.learner import Learner
from models.core.state import FORMAT, VERSION, InvalidState, encode_array

Doc = dict[str, Any]
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _state(learner: Learner) -> str:
    return json.dumps(learner.export_state(), sort_keys=True)


def _trained(case: Any, n: int, seed: int) -> Learner:
    return _learned(case, case.stream(n, seed))


def _learned(case: Any, trials: list[tuple[Any, Any]]) -> Learner:
    learner = case.build()
    for x, y in trials:
        learner.learn(x, y)
    return learner


# -- round trip -----------------------------------------------------------------------------


@SETTINGS
@given(n=st.integers(0, 80), seed=st.integers(0, 2**32 - 1), more=st.integers(0, 40))
def test_round_trip_is_exact(case: Any, n: int, seed: int, more: int) -> None:
    learner = _trained(case, n, seed)
    text = json.dumps(learner.export_state())
    copy_ = registry.from_state(json.loads(text))
    assert _state(copy_) == _state(learner)
    assert copy_.counters() == learner.counters() and copy_.counters()["trials"] == n
    for x, y in case.stream(more, seed + 1):
        assert copy_.predict(x) == learner.predict(x)
        np.testing.assert_array_equal(copy_.scores(x), learner.scores(x))
        assert copy_.learn(x, y) == learner.learn(x, y)
    assert _state(copy_) == _state(learner)


def test_document_is_plain_json(case: Any) -> None:
    doc = _trained(case, 30, 1).export_state()
    assert doc["format"] == FORMAT and doc["version"] == VERSION
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc
    for name, arr in doc["arrays"].items():
        assert set(arr) == {"dtype", "shape", "data"}, name
        base64.b64decode(arr["data"], validate=True)


# -- corruptions ------------------------------------------------------------------------------


def _arrays(doc: Doc) -> list[tuple[Doc, str]]:
    """Every (document, array name) pair, children included."""
    out = [(doc, name) for name in doc["arrays"]]
    for child in doc["children"].values():
        out += _arrays(child)
    return out


def _put(mapping: Doc, key: str, value: Any) -> None:
    mapping[key] = value


def _drop(mapping: Doc, key: str) -> None:
    del mapping[key]


def _on_first_array(fn: Callable[[Doc], None]) -> Callable[[Doc], None]:
    """Corrupt the encoded form of the document's first array (a child's if it has none)."""

    def corrupt(doc: Doc) -> None:
        target, name = _arrays(doc)[0]
        fn(target["arrays"][name])

    return corrupt


def _set_value(path: tuple[str, ...], fn: Callable[[np.ndarray], None]) -> Callable[[Doc], None]:
    """Change values of the array at ``path`` (child roles..., array name), re-encoded."""

    def corrupt(doc: Doc) -> None:
        for role in path[:-1]:
            doc = doc["children"][role]
        enc = doc["arrays"][path[-1]]
        arr = np.frombuffer(base64.b64decode(enc["data"]), dtype="<f8").copy()
        fn(arr)
        doc["arrays"][path[-1]] = encode_array(arr.reshape(enc["shape"]))

    return corrupt


def _first_path(doc: Doc) -> tuple[str, ...]:
    if doc["arrays"]:
        return (next(iter(doc["arrays"])),)
    role, child = next(iter(doc["children"].items()))
    return (role, *_first_path(child))


def _assign(index: int, value: float) -> Callable[[np.ndarray], None]:
    def fn(a: np.ndarray) -> None:
        a[index] = value

    return fn


def _size_key(d: Doc) -> str:
    return "n_features" if "n_features" in d["params"] else "n_experts"


#: Whole-document replacements.
REPLACED: dict[str, Callable[[Doc], Any]] = {
    "not an object": lambda d: [d],
    "none": lambda d: None,
    "text": lambda d: json.dumps(d),
}

#: In-place corruptions of a deep copy of a valid document.
CORRUPTIONS: dict[str, Callable[[Doc], None]] = {
    "wrong format": lambda d: _put(d, "format", "pickle"),
    "wrong version": lambda d: _put(d, "version", VERSION + 1),
    "version as text": lambda d: _put(d, "version", str(VERSION)),
    "version as bool": lambda d: _put(d, "version", True),
    "wrong kind": lambda d: _put(d, "kind", "winnow" if d["kind"] != "winnow" else "perceptron"),
    "kind not a string": lambda d: _put(d, "kind", ["winnow"]),
    "params not an object": lambda d: _put(d, "params", "winnow"),
    "params of an unknown kind": lambda d: _put(d, "params", {"kind": "nope"}),
    "params with an unhashable kind": lambda d: _put(d, "params", {"kind": []}),
    "params with labels not a list": lambda d: _put(d["params"], "labels", 5),
    "params with one label": lambda d: _put(d["params"], "labels", ["x"]),
    "params with another size": lambda d: _put(d["params"], _size_key(d), 3),
    "missing counters": lambda d: _drop(d, "counters"),
    "missing arrays": lambda d: _drop(d, "arrays"),
    "missing children": lambda d: _drop(d, "children"),
    "missing format": lambda d: _drop(d, "format"),
    "extra key": lambda d: _put(d, "pickle", "cos\nsystem\n"),
    "counters not an object": lambda d: _put(d, "counters", [0, 0, 0, 0]),
    "missing counter": lambda d: _drop(d["counters"], "version"),
    "extra counter": lambda d: _put(d["counters"], "epochs", 1),
    "negative counter": lambda d: _put(d["counters"], "trials", -1),
    "bool counter": lambda d: _put(d["counters"], "mistakes", True),
    "float counter": lambda d: _put(d["counters"], "updates", 1.0),
    "text counter": lambda d: _put(d["counters"], "trials", "5"),
    "none counter": lambda d: _put(d["counters"], "trials", None),
    "arrays not an object": lambda d: _put(d, "arrays", []),
    "extra array": lambda d: _put(d["arrays"], "extra_", encode_array(np.zeros(2))),
    "missing array": lambda d: (lambda t, n: _drop(t["arrays"], n))(*_arrays(d)[0]),
    "array not an object": lambda d: (lambda t, n: _put(t["arrays"], n, "AAAA"))(*_arrays(d)[0]),
    "array without data": _on_first_array(lambda a: _drop(a, "data")),
    "array without dtype": _on_first_array(lambda a: _drop(a, "dtype")),
    "array without shape": _on_first_array(lambda a: _drop(a, "shape")),
    "array with an extra key": _on_first_array(lambda a: _put(a, "order", "F")),
    "dtype int64": _on_first_array(lambda a: _put(a, "dtype", "int64")),
    "dtype float32": _on_first_array(lambda a: _put(a, "dtype", "float32")),
    "dtype object": _on_first_array(lambda a: _put(a, "dtype", "object")),
    "dtype none": _on_first_array(lambda a: _put(a, "dtype", None)),
    "shape longer": _on_first_array(lambda a: _put(a, "shape", [a["shape"][0] + 1])),
    "shape shorter": _on_first_array(lambda a: _put(a, "shape", [a["shape"][0] - 1])),
    "shape 2-d": _on_first_array(lambda a: _put(a, "shape", [1, *a["shape"]])),
    "shape scalar": _on_first_array(lambda a: _put(a, "shape", [])),
    "shape negative": _on_first_array(lambda a: _put(a, "shape", [-1])),
    "shape text": _on_first_array(lambda a: _put(a, "shape", "3")),
    "shape bool": _on_first_array(lambda a: _put(a, "shape", [True])),
    "shape float": _on_first_array(lambda a: _put(a, "shape", [float(a["shape"][0])])),
    "truncated data": _on_first_array(lambda a: _put(a, "data", a["data"][:-4])),
    "data cut mid-quantum": _on_first_array(lambda a: _put(a, "data", a["data"][:-1])),
    "data with extra bytes": _on_first_array(
        lambda a: _put(a, "data", base64.b64encode(base64.b64decode(a["data"]) + bytes(8)).decode())
    ),
    "empty data": _on_first_array(lambda a: _put(a, "data", "")),
    "non-base64 data": _on_first_array(lambda a: _put(a, "data", "!!!!")),
    "non-ascii data": _on_first_array(lambda a: _put(a, "data", "ÿÿÿÿ")),
    "data not a string": _on_first_array(lambda a: _put(a, "data", 12)),
    "data as a list": _on_first_array(lambda a: _put(a, "data", [0.0, 1.0])),
    "nan in array": lambda d: _set_value(_first_path(d), _assign(0, np.nan))(d),
    "inf in array": lambda d: _set_value(_first_path(d), _assign(0, np.inf))(d),
    "-inf in array": lambda d: _set_value(_first_path(d), _assign(-1, -np.inf))(d),
    "children not an object": lambda d: _put(d, "children", []),
    "extra child": lambda d: _put(d["children"], "spy", copy.deepcopy(d)),
}


def _in_child(fn: Callable[[Doc], None]) -> Callable[[Doc], None]:
    return lambda d: fn(d["children"]["learner"])


def _corruptions(case: Any) -> dict[str, Callable[[Doc], Any]]:
    """Every corruption that applies to ``case``'s documents."""
    out: dict[str, Callable[[Doc], Any]] = dict(CORRUPTIONS)
    if case.kind == "subexpert":  # the inner learner's document is checked as strictly
        out["missing child"] = lambda d: _drop(d["children"], "learner")
        out["child not an object"] = lambda d: _put(d["children"], "learner", [])
        for name in ("wrong kind", "negative counter", "nan in array", "shape longer", "extra key"):
            out[f"child: {name}"] = _in_child(CORRUPTIONS[name])
    for path in case.nonneg_arrays:
        out[f"negative {'.'.join(path)}"] = _set_value(path, _assign(0, -1.0))
    return out


def _corrupt(text: str, name: str, case: Any) -> Any:
    """Corruption ``name`` of a fresh copy of the document whose JSON text is ``text``."""
    bad = json.loads(text)
    if name in REPLACED:
        return REPLACED[name](bad)
    _corruptions(case)[name](bad)
    return bad


def _held_out(learner: Learner, case: Any, n: int, seed: int) -> list[Any]:
    """Instances of a seeded stream, as ``learner`` checks them (it predicts them as they
    are, checking again only that they fit)."""
    return [learner.coerce(x) for x, _ in case.stream(n, seed)]


def _unchanged(learner: Learner, held_out: list[Any]) -> tuple[str, list[Any]]:
    """What a failed import must leave as it was: the state, the held-out predictions."""
    return _state(learner), [learner.predict(x) for x in held_out]


def _assert_rejected(
    learner: Learner,
    bad: Any,
    name: str,
    held_out: list[Any],
    unchanged: tuple[str, list[Any]] | None = None,
) -> None:
    """``bad`` is refused by both imports and leaves ``learner`` as it was (``unchanged``,
    when known: its :func:`_unchanged`)."""
    before, predictions = unchanged or _unchanged(learner, held_out)
    with pytest.raises(InvalidState):
        learner.import_state(bad)
        pytest.fail(f"import_state accepted: {name}")
    assert _state(learner) == before, f"{name}: a failed import changed the learner"
    assert [learner.predict(x) for x in held_out] == predictions
    with pytest.raises(InvalidState):
        registry.from_state(bad)
        pytest.fail(f"from_state accepted: {name}")


def test_every_corruption_is_rejected(case: Any) -> None:
    learner = _trained(case, 60, 5)
    text = json.dumps(learner.export_state())
    held_out = _held_out(learner, case, 20, 6)
    unchanged = _unchanged(learner, held_out)
    failures = []
    for name in [*REPLACED, *_corruptions(case)]:
        bad = _corrupt(text, name, case)
        try:
            _assert_rejected(learner, bad, name, held_out, unchanged)
        except BaseException as exc:  # collect them all, then fail once
            failures.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0][:150]}")
    assert [learner.predict(x) for x in held_out] == unchanged[1]
    assert not failures, "\n".join(failures)


#: The JSON text of each case's untrained learner's state, by case id.
_UNTRAINED: dict[str, str] = {}


def _untrained_state(case: Any) -> Doc:
    """A fresh copy of the state document of ``case``'s learner as built (built once)."""
    if case.id not in _UNTRAINED:
        _UNTRAINED[case.id] = json.dumps(case.build().export_state())
    doc: Doc = json.loads(_UNTRAINED[case.id])
    return doc


def test_params_of_another_spec_are_rejected(case: Any, all_cases: list[Any]) -> None:
    learner = _trained(case, 30, 5)
    before = _state(learner)
    for other in all_cases:
        if other.spec == case.spec and other.labels == case.labels:
            continue
        doc = _untrained_state(other)
        with pytest.raises(InvalidState):
            learner.import_state(doc)
        assert _state(learner) == before, other.id
    changed = learner.export_state()
    changed["params"]["labels"] = list(reversed(changed["params"]["labels"]))
    with pytest.raises(InvalidState):
        learner.import_state(changed)
    assert _state(learner) == before


@SETTINGS
@given(data=st.data())
def test_random_corruption_is_rejected_and_harmless(case: Any, data: st.DataObject) -> None:
    n = data.draw(st.integers(0, 60), label="trials")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    name = data.draw(st.sampled_from(sorted(_corruptions(case))), label="corruption")
    learner = _trained(case, n, seed)
    bad = _corrupt(json.dumps(learner.export_state()), name, case)
    _assert_rejected(learner, bad, name, _held_out(learner, case, 10, seed + 1))


#: Each case's 60 trials of seed 9, by case id.
_STREAMS: dict[str, list[tuple[Any, Any]]] = {}


def _first_trials(case: Any, n: int) -> list[tuple[Any, Any]]:
    """The first ``n`` (up to 60) of ``case``'s trials of seed 9 (generated once)."""
    if case.id not in _STREAMS:
        _STREAMS[case.id] = case.stream(60, 9)
    return _STREAMS[case.id][:n]


@SETTINGS
@given(data=st.data())
def test_random_byte_flips_never_escape(case: Any, data: st.DataObject) -> None:
    """Flip bytes of one encoded array: the import succeeds or raises InvalidState only."""
    learner = _learned(case, _first_trials(case, data.draw(st.integers(0, 60), label="trials")))
    doc = learner.export_state()
    target, name = data.draw(st.sampled_from(_arrays(doc)), label="array")
    raw = bytearray(base64.b64decode(target["arrays"][name]["data"]))
    for _ in range(data.draw(st.integers(1, 4), label="flips")):
        if raw:
            i = data.draw(st.integers(0, len(raw) - 1), label="byte")
            raw[i] = data.draw(st.integers(0, 255), label="value")
    target["arrays"][name]["data"] = base64.b64encode(bytes(raw)).decode()
    before = _state(learner)
    try:
        learner.import_state(doc)
    except InvalidState:
        assert _state(learner) == before
        return
    arrays = [a for t, n in _arrays(learner.export_state()) for a in [t["arrays"][n]]]
    assert all(
        np.isfinite(np.frombuffer(base64.b64decode(a["data"]), dtype="<f8")).all() for a in arrays
    )
    assert all(math.isfinite(float(v)) for v in np.ravel(learner.weights()))  # type: ignore[attr-defined]


# -- no pickle anywhere in models/ ----------------------------------------------------------------

PICKLERS = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "shelve", "marshal"}


def test_models_never_import_pickle() -> None:
    sources = sorted(Path(models.__file__).parent.rglob("*.py"))
    assert len(sources) > 5
    for path in sources:
        text = path.read_text()
        tree = ast.parse(text, filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "__import__":
                names = [a.value for a in node.args if isinstance(a, ast.Constant)]
            for name in names:
                assert name.split(".")[0] not in PICKLERS, f"{path.name} imports {name}"
        assert "allow_pickle=True" not in text, f"{path.name} loads pickled numpy data"


def test_a_parameter_added_later_reads_as_null_in_older_documents() -> None:
    """A state written before ``balanced_init`` existed (no such key in its params, at the
    top and inside a bagging of it) still loads; the same document read by a learner whose
    value is not null, or with a key the learner does not have, is refused."""
    spec = {"kind": "vr-combine", "alphas": [1.1], "ps": [2.0], "perceptron": False}
    for outer in (spec, {"kind": "bagging", "n_models": 2, "learner": spec}):
        learner = registry.build(outer, labels=[0, 1, 2], size=4)
        for t in range(20):
            learner.learn(np.eye(3)[[(t + i) % 3 for i in range(4)]], t % 3)
        doc = learner.export_state()
        older = copy.deepcopy(doc)
        inner = older["params"] if outer is spec else older["params"]["learner"]
        assert inner.pop("balanced_init") is None
        fresh = registry.build(outer, labels=[0, 1, 2], size=4)
        fresh.import_state(older)
        assert fresh.export_state() == doc
        started = {**spec, "balanced_init": [2.0, 1.0]}
        other = registry.build(
            started if outer is spec else {**outer, "learner": started}, labels=[0, 1, 2], size=4
        )
        with pytest.raises(InvalidState, match="made by"):
            other.import_state(older)
        extra = copy.deepcopy(doc)
        extra["params"]["unknown"] = None
        with pytest.raises(InvalidState, match="made by"):
            fresh.import_state(extra)
