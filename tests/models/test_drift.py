"""The drift detectors against River's, their state documents, and what they refuse.

River's ``drift.ADWIN`` and ``drift.PageHinkley`` are the oracle: on seeded and generated
streams (0/1, integer and real-valued, with and without a step), at River's defaults, at
ours and at drawn parameters, each detector fires at exactly River's indices, one value
at a time and as a batch.
"""

from __future__ import annotations

import inspect
import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from river import drift as river_drift

from models import InvalidInstance, InvalidParameter, InvalidState
from models.drift import ADWIN, DETECTORS, DriftDetector, PageHinkley

RIVER = {ADWIN: river_drift.ADWIN, PageHinkley: river_drift.PageHinkley}


def river_fired(
    cls: type[DriftDetector], params: dict[str, Any], xs: np.ndarray
) -> tuple[list[int], int]:
    """The indices where River's detector fires on ``xs``, and how far River went.

    River's ADWIN panics when ``max_buckets=1`` has emptied a row it then drops from;
    the comparison then stops there (the detector here drops the oldest non-empty row).
    """
    detector = RIVER[cls](**params)
    out = []
    for t, x in enumerate(xs.tolist()):
        try:
            detector.update(x)
        except BaseException as e:  # pyo3's PanicException derives from BaseException
            if params.get("max_buckets") != 1 or "slice index" not in str(e):
                raise
            return out, t
        if detector.drift_detected:
            out.append(t)
    return out, len(xs)


def assert_same_as_river(cls: type[DriftDetector], params: dict[str, Any], xs: np.ndarray) -> int:
    """Ours fires where River fires, batched and one by one, both given every parameter
    (ours where ``params`` leaves one out); the number of firings."""
    params = {**cls().get_params(), **params}
    want, stop = river_fired(cls, params, xs)
    many = cls(**params).update_many(xs)
    one = cls(**params)
    each = [t for t, x in enumerate(xs.tolist()) if one.update(x)]
    assert many.dtype == np.int64
    assert [t for t in many.tolist() if t < stop] == want
    assert many.tolist() == each
    return len(want)


def stream(seed: int, n: int, form: str) -> np.ndarray:
    """A seeded stream with a step somewhere: 0/1 mistakes, small integers or reals."""
    rng = np.random.default_rng(seed)
    cut = int(rng.integers(0, n + 1))
    if form == "bernoulli":
        p, q = rng.random(2)
        return np.r_[rng.random(cut) < p, rng.random(n - cut) < q].astype(np.float64)
    if form == "integers":
        return np.r_[rng.integers(0, 3, cut), rng.integers(2, 8, n - cut)].astype(np.float64)
    scale, shift = rng.random() * 3, rng.normal() * 2
    return rng.normal(size=n) * scale + np.r_[np.zeros(cut), np.full(n - cut, shift)]


FORMS = ("bernoulli", "integers", "reals")

adwin_params = st.fixed_dictionaries(
    {
        "delta": st.floats(1e-7, 0.5),
        "clock": st.integers(1, 64),
        "max_buckets": st.integers(1, 8),
        "min_window_length": st.integers(1, 40),
        "grace_period": st.integers(0, 100),
    }
)
ph_params = st.fixed_dictionaries(
    {
        "min_instances": st.integers(1, 100),
        "delta": st.floats(0.0, 0.1),
        "threshold": st.floats(0.5, 80.0),
        "alpha": st.sampled_from([1.0, 0.9999, 0.999, 0.99]),
        "mode": st.sampled_from(["up", "down", "both"]),
    }
)


@settings(max_examples=150, deadline=None)
@given(params=adwin_params, seed=st.integers(0, 2**32 - 1), form=st.sampled_from(FORMS))
def test_adwin_fires_where_river_fires(params: dict[str, Any], seed: int, form: str) -> None:
    assert_same_as_river(ADWIN, params, stream(seed, 3000, form))


@settings(max_examples=150, deadline=None)
@given(params=ph_params, seed=st.integers(0, 2**32 - 1), form=st.sampled_from(FORMS))
def test_page_hinkley_fires_where_river_fires(params: dict[str, Any], seed: int, form: str) -> None:
    assert_same_as_river(PageHinkley, params, stream(seed, 3000, form))


@given(xs=st.lists(st.sampled_from([0.0, 1.0]), max_size=400), clock=st.integers(1, 4))
@settings(deadline=None)
def test_short_streams_fire_where_river_fires(xs: list[float], clock: int) -> None:
    arr = np.array(xs)
    assert_same_as_river(ADWIN, {"clock": clock, "min_window_length": 1, "grace_period": 0}, arr)
    assert_same_as_river(PageHinkley, {"min_instances": 1, "threshold": 2.0, "mode": "both"}, arr)


def river_defaults(cls: type[DriftDetector]) -> dict[str, Any]:
    return {k: p.default for k, p in inspect.signature(RIVER[cls]).parameters.items()}


@pytest.mark.parametrize("cls", [ADWIN, PageHinkley])
@pytest.mark.parametrize("defaults", ["ours", "river"])
@pytest.mark.parametrize("seed", range(4))
def test_step_streams_at_the_defaults(cls: type[DriftDetector], defaults: str, seed: int) -> None:
    """Long mistake streams whose error rate steps up and back down, at either defaults:
    the same firings as River, and at least one."""
    params = river_defaults(cls) if defaults == "river" else {}
    rng = np.random.default_rng([seed, 5])
    rates = np.repeat([0.1, 0.4, 0.1, 0.6], 8000)
    xs = (rng.random(rates.size) < rates).astype(np.float64)
    assert assert_same_as_river(cls, params, xs) >= 1


def test_the_defaults_are_documented_where_they_differ_from_river() -> None:
    assert ADWIN().get_params() == {**river_defaults(ADWIN), "delta": 1e-5}
    changed = {"delta": 0.03, "threshold": 50.0, "alpha": 1.0, "mode": "up"}
    assert PageHinkley().get_params() == {**river_defaults(PageHinkley), **changed}


# -- state ---------------------------------------------------------------------------------


def detectors() -> list[DriftDetector]:
    return [
        ADWIN(),
        ADWIN(delta=0.01, clock=3, max_buckets=2, min_window_length=2, grace_period=0),
        PageHinkley(),
        PageHinkley(min_instances=5, threshold=3.0, alpha=0.999, mode="both"),
    ]


@pytest.mark.parametrize("detector", detectors(), ids=repr)
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), split=st.integers(0, 4000))
def test_state_round_trip_continues_identically(
    detector: DriftDetector, seed: int, split: int
) -> None:
    xs = stream(seed, 4000, "bernoulli")
    whole = detector.clone().update_many(xs)
    first = detector.clone()
    head = first.update_many(xs[:split])
    doc = json.loads(json.dumps(first.export_state(), allow_nan=False))
    second = detector.clone()
    second.import_state(doc)
    assert second.export_state() == first.export_state()
    assert second.drift_detected == first.drift_detected
    tail = second.update_many(xs[split:]) + split
    assert np.r_[head, tail].tolist() == whole.tolist()


@pytest.mark.parametrize("cls", [ADWIN, PageHinkley])
def test_state_round_trip_right_after_a_drift(cls: type[DriftDetector]) -> None:
    """A state exported at the step where a drift fired restarts as River does."""
    xs = np.r_[np.zeros(2000), np.ones(2000)]
    whole = cls().update_many(xs)
    at = int(whole[0]) + 1
    first = cls()
    first.update_many(xs[:at])
    assert first.drift_detected
    second = cls()
    second.import_state(json.loads(json.dumps(first.export_state())))
    assert second.drift_detected
    assert (second.update_many(xs[at:]) + at).tolist() == whole[1:].tolist()


def test_reset_forgets_and_clone_keeps_the_parameters() -> None:
    for detector in detectors():
        fresh = detector.export_state()
        xs = np.r_[np.zeros(3000), np.ones(3000)]
        fired = detector.update_many(xs)
        assert detector.export_state() != fresh
        detector.reset()
        assert detector.export_state() == fresh
        assert detector.update_many(xs).tolist() == fired.tolist()
        copy = detector.clone()
        assert copy.get_params() == detector.get_params() and copy is not detector
        assert type(copy) is DETECTORS[detector.kind]


def corrupt(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    place = doc
    for key in path[:-1]:
        place = place[key]
    if value is KeyError:
        del place[path[-1]]
    else:
        place[path[-1]] = value
    return doc


ADWIN_BAD = [
    (("format",), "committee.state"),
    (("version",), 2),
    (("version",), True),
    (("kind",), "page-hinkley"),
    (("params", "delta"), 0.5),
    (("params",), KeyError),
    (("extra",), 1),
    (("state", "total"), "1"),
    (("state", "total"), math.inf),
    (("state", "variance"), None),
    (("state", "tick"), 32),
    (("state", "tick"), -1),
    (("state", "tick"), 1.0),
    (("state", "drift_detected"), 1),
    (("state", "totals"), []),
    (("state", "totals"), [[1.0]] * 65),
    (("state", "totals", 0), [0.0] * 6),
    (("state", "totals", 0), "0"),
    (("state", "totals", 0, 0), "x"),
    (("state", "totals", -1), []),
    (("state", "variances"), [[0.0]]),
    (("state", "variances", 0, 0), -1.0),
    (("state", "variances", 0), KeyError),
    (("state", "buckets"), []),
    (("state", "tick"), KeyError),
]


@pytest.mark.parametrize(("path", "value"), ADWIN_BAD)
def test_adwin_refuses_bad_state(path: tuple[Any, ...], value: Any) -> None:
    detector = ADWIN()
    detector.update_many(np.random.default_rng(0).random(500) < 0.3)
    good = detector.export_state()
    assert len(good["state"]["totals"]) > 2  # the window spans several rows
    with pytest.raises(InvalidState):
        detector.import_state(corrupt(good, path, value))
    assert detector.export_state() == good  # untouched


PH_BAD = [
    (("format",), "committee.drift.v2"),
    (("kind",), "adwin"),
    (("params", "mode"), "both"),
    (("state", "n"), -1),
    (("state", "n"), 2.5),
    (("state", "n"), True),
    (("state", "mean"), math.nan),
    (("state", "min_increase"), None),
    (("state", "min_increase"), 1e9),
    (("state", "max_decrease"), -1e9),
    (("state", "drift_detected"), "no"),
    (("state", "sum_increase"), KeyError),
    (("state",), []),
]


@pytest.mark.parametrize(("path", "value"), PH_BAD)
def test_page_hinkley_refuses_bad_state(path: tuple[Any, ...], value: Any) -> None:
    detector = PageHinkley()
    detector.update_many(np.random.default_rng(0).random(500) < 0.3)
    good = detector.export_state()
    with pytest.raises(InvalidState):
        detector.import_state(corrupt(good, path, value))
    assert detector.export_state() == good


def test_a_fresh_state_has_no_infinity_and_reads_back() -> None:
    for detector in detectors():
        doc = detector.export_state()
        text = json.dumps(doc, allow_nan=False)
        again = detector.clone()
        again.import_state(json.loads(text))
        assert again.export_state() == doc
    with pytest.raises(InvalidState):
        PageHinkley().import_state(
            corrupt(PageHinkley().export_state(), ("state", "min_increase"), 0.0)
        )
    with pytest.raises(InvalidState):
        ADWIN().import_state("not a document")


# -- parameters and values -----------------------------------------------------------------

BAD_PARAMS = [
    (ADWIN, "delta", 0.0),
    (ADWIN, "delta", 1.0),
    (ADWIN, "delta", math.nan),
    (ADWIN, "delta", "0.1"),
    (ADWIN, "clock", 0),
    (ADWIN, "clock", 2**31),
    (ADWIN, "clock", 1.5),
    (ADWIN, "max_buckets", 0),
    (ADWIN, "max_buckets", 101),
    (ADWIN, "min_window_length", 0),
    (ADWIN, "min_window_length", True),
    (ADWIN, "grace_period", -1),
    (ADWIN, "grace_period", 2**53 + 1),
    (PageHinkley, "min_instances", 0),
    (PageHinkley, "delta", -0.1),
    (PageHinkley, "delta", math.inf),
    (PageHinkley, "threshold", 0.0),
    (PageHinkley, "alpha", 0.0),
    (PageHinkley, "alpha", 1.01),
    (PageHinkley, "mode", "UP"),
    (PageHinkley, "mode", None),
]


@pytest.mark.parametrize(("cls", "name", "value"), BAD_PARAMS)
def test_bad_parameters_are_refused_by_name(
    cls: type[DriftDetector], name: str, value: Any
) -> None:
    with pytest.raises(InvalidParameter) as caught:
        cls(**{name: value})
    assert caught.value.name == name
    assert str(caught.value).startswith(f"{name}={value!r} is invalid: expected ")


def test_parameters_are_stored_untouched() -> None:
    adwin = ADWIN(delta=0.01, clock=7, max_buckets=3, min_window_length=4, grace_period=0)
    assert adwin.get_params() == {
        "delta": 0.01,
        "clock": 7,
        "max_buckets": 3,
        "min_window_length": 4,
        "grace_period": 0,
    }
    assert repr(adwin).startswith("ADWIN(delta=0.01, clock=7")


@pytest.mark.parametrize("detector", detectors(), ids=repr)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 1e101, "1", None, [1.0]])
def test_bad_values_are_refused(detector: DriftDetector, bad: Any) -> None:
    before = detector.export_state()
    with pytest.raises(InvalidInstance):
        detector.update(bad)
    with pytest.raises(InvalidInstance):
        detector.update_many([0.0, 1.0, bad])
    assert detector.export_state() == before


def test_update_many_takes_any_sequence_and_leaves_it_alone() -> None:
    xs = np.r_[np.zeros(1500), np.ones(1500)]
    kept = xs.copy()
    for detector in detectors():
        fired = detector.clone().update_many(xs)
        assert np.array_equal(xs, kept)
        assert detector.clone().update_many(xs.tolist()).tolist() == fired.tolist()
        assert detector.clone().update_many(xs.astype(bool)).tolist() == fired.tolist()
        assert detector.clone().update_many(xs.astype(np.int8)).tolist() == fired.tolist()
        assert detector.clone().update_many([]).tolist() == []
    with pytest.raises(InvalidInstance):
        ADWIN().update_many(np.zeros((2, 2)))
    assert ADWIN().update(True) is False
    assert PageHinkley().update(np.float32(1.0)) is False
