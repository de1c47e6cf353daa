"""A run of trials learned together (``learn_prefix``, ``learn_expert_prefix``) gives
what one-by-one trials give: the same mistakes and updates, the same counters and the
same state bit for bit, and it stops where one by one refuses an update, having changed
nothing from that trial on."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models import registry
from models.core.instance import AttributeBatch, Attributes, ExpertBatch, Experts
from models.core.learner import Learner, UpdateRefused

N_EXPERTS, N_FEATURES = 6, 12

#: id: (spec, labels, input form)
KINDS: dict[str, tuple[dict[str, Any], list[Hashable], str]] = {
    "committee": ({"kind": "committee", "alpha": 1.7}, [0, 1, 2], "experts"),
    "committee-tracking": (
        {"kind": "committee", "alpha": 3.0, "weight_floor": 0.1, "fixed_share": 0.05},
        [0, 1, 2, 3],
        "experts",
    ),
    "weighted-majority": ({"kind": "weighted-majority", "beta": 0.3}, [0, 1, 2], "experts"),
    "weighted-majority-on-mistake": (
        {"kind": "weighted-majority", "update": "on_mistake", "fixed_share": 0.1},
        [0, 1],
        "experts",
    ),
    "fusion": ({"kind": "fusion"}, ["a", "b", "c"], "experts"),
    "multiclass-winnow": ({"kind": "multiclass-winnow", "alpha": 1.5}, [0, 1, 2], "experts"),
    "multiclass-winnow-refuses": ({"kind": "multiclass-winnow", "alpha": 1e305}, [0, 1], "experts"),
    "winnow": ({"kind": "winnow", "alpha": 2.0, "theta": 3.0}, [1, -1], "attributes"),
    "winnow-eliminate": (
        {"kind": "winnow", "demotion": "eliminate", "weight_floor": 0.01},
        [1, -1],
        "attributes",
    ),
    "balanced-winnow": ({"kind": "balanced-winnow", "alpha": 1.5}, [1, -1], "attributes"),
    "balanced-winnow-refuses": (
        {"kind": "balanced-winnow", "alpha": 1e150, "theta": 0.5},
        [1, -1],
        "attributes",
    ),
    "perceptron": ({"kind": "perceptron", "eta": 0.5}, [1, -1], "attributes"),
    "alma": ({"kind": "alma", "alma_alpha": 0.9}, ["yes", "no"], "attributes"),
}


def _learner(spec: dict[str, Any], labels: list[Hashable], form: str) -> Learner:
    size = {"n_experts": N_EXPERTS} if form == "experts" else {"n_features": N_FEATURES}
    return registry.build({**spec, **size, "labels": labels})


def _stream(seed: int, n: int, k: int, form: str) -> tuple[list[Any], list[int]]:
    """``n`` random instances (some rows empty) and class indices."""
    rng = np.random.default_rng(seed)
    xs: list[Any] = []
    for _ in range(n):
        if form == "experts":
            votes = rng.random((N_EXPERTS, k)) * (rng.random((N_EXPERTS, k)) < 0.5)
            xs.append(Experts.from_dense(votes))
        else:
            dense = rng.random(N_FEATURES) * (rng.random(N_FEATURES) < 0.4)
            xs.append(Attributes.from_dense(np.where(rng.random(N_FEATURES) < 0.5, 1.0, dense)))
    return xs, rng.integers(k, size=n).tolist()


def _one_by_one(learner: Learner, xs: list[Any], ys: list[Hashable]) -> tuple[list[bool], ...]:
    """Mistakes and updates of each trial up to the first refused one (not counted)."""
    mistakes, updates = [], []
    for x, y in zip(xs, ys, strict=True):
        try:
            predicted, updated = learner.trial(x, y)
        except UpdateRefused:
            break
        mistakes.append(predicted != learner.class_of(y))
        updates.append(updated)
    return mistakes, updates


def _learn_prefix(learner: Learner, xs: Any, ys: list[Hashable]) -> Any:
    name = "learn_prefix" if learner.input_kind == "attributes" else "learn_expert_prefix"
    return getattr(learner, name)(xs, ys)


def _batch(xs: list[Any], form: str) -> AttributeBatch | ExpertBatch:
    return (
        ExpertBatch.from_instances(xs) if form == "experts" else AttributeBatch.from_instances(xs)
    )


def _same_state(a: Learner, b: Learner) -> None:
    assert a.counters() == b.counters()
    sa, sb = a.export_state(), b.export_state()
    assert sa == sb  # arrays encoded byte for byte


@pytest.mark.parametrize("kind", sorted(KINDS))
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 60), cut=st.integers(0, 60))
def test_a_run_learned_together_is_the_trials_one_by_one(
    kind: str, seed: int, n: int, cut: int
) -> None:
    spec, labels, form = KINDS[kind]
    xs, cs = _stream(seed, n, len(labels), form)
    ys = [labels[c] for c in cs]
    alone, together = _learner(spec, labels, form), _learner(spec, labels, form)
    # a stretch one by one first, so the run starts from a learned state
    cut = min(cut, n)
    want_m, want_u = _one_by_one(alone, xs, ys)
    got_m: list[bool] = []
    got_u: list[bool] = []
    for a, b in ((0, cut), (cut, n)):
        if len(got_m) < a:  # refused before this part
            break
        m, u, done = _learn_prefix(together, _batch(xs[a:b], form), ys[a:b])
        assert m.shape == u.shape == (b - a,) and not m[done:].any() and not u[done:].any()
        got_m += m[:done].tolist()
        got_u += u[:done].tolist()
        if done < b - a:
            break
    assert (got_m, got_u) == (want_m, want_u)
    _same_state(alone, together)


@pytest.mark.parametrize("kind", ["multiclass-winnow-refuses", "balanced-winnow-refuses"])
def test_a_run_stops_at_the_refused_update_and_goes_on_as_one_by_one(kind: str) -> None:
    spec, labels, form = KINDS[kind]
    xs, cs = _stream(7, 80, len(labels), form)
    ys = [labels[c] for c in cs]
    alone, together = _learner(spec, labels, form), _learner(spec, labels, form)
    refused = 0
    at = 0
    while at < len(xs):
        m, u, done = _learn_prefix(together, xs[at:], ys[at:])
        for x, y, mistake, updated in zip(xs[at : at + done], ys[at:], m, u, strict=False):
            predicted, upd = alone.trial(x, y)
            assert (predicted != alone.class_of(y), upd) == (mistake, updated)
        at += done
        if at < len(xs):  # refused by both, neither changed
            refused += 1
            before = together.export_state()
            for learner in (alone, together):
                with pytest.raises(UpdateRefused):
                    learner.trial(xs[at], ys[at])
            assert together.export_state() == before
            at += 1
        _same_state(alone, together)
    assert refused > 0


def test_a_batch_checks_every_instance_and_label_before_it_learns() -> None:
    spec, labels, form = KINDS["committee"]
    learner = _learner(spec, labels, form)
    xs, _ = _stream(3, 5, len(labels), form)
    before = learner.export_state()
    with pytest.raises(ValueError, match="unknown label"):
        _learn_prefix(learner, xs, [0, 1, 2, 0, "z"])
    wide = Experts.from_dense(np.ones((N_EXPERTS + 1, 3)))
    with pytest.raises(ValueError, match="sub-experts"):
        _learn_prefix(learner, [*xs[:4], wide], [0] * 5)
    with pytest.raises(ValueError, match="4 labels"):
        _learn_prefix(learner, xs, [0] * 4)
    assert learner.export_state() == before


def test_rows_decoded_together_make_their_batch_without_a_copy() -> None:
    xs, _ = _stream(5, 9, 3, "experts")
    ptr = np.zeros(len(xs) + 1, dtype=np.int64)
    np.cumsum([x.expert.size for x in xs], out=ptr[1:])
    e, c, v = (np.concatenate([getattr(x, a) for x in xs]) for a in ("expert", "cls", "value"))
    rows = Experts.rows(
        e,
        c,
        v,
        ptr,
        np.array([x.size for x in xs]),
        np.array([x.n_classes for x in xs]),
        np.array([x.low for x in xs]),
        np.array([x.high for x in xs]),
    )
    batch = ExpertBatch.from_instances(rows[2:7])
    assert np.shares_memory(batch.value, rows[2].value) and len(batch) == 5
    joined = ExpertBatch.from_instances(xs[2:7])
    for a in ("indptr", "expert", "cls", "value"):
        assert np.array_equal(getattr(batch, a), getattr(joined, a))
    assert (batch.size, batch.n_classes, batch.low, batch.high) == (
        joined.size,
        joined.n_classes,
        joined.low,
        joined.high,
    )


@pytest.mark.parametrize("kind", sorted(k for k, v in KINDS.items() if v[2] == "experts"))
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 60))
def test_a_run_learned_together_predicts_each_class_one_by_one_predicts(
    kind: str, seed: int, n: int
) -> None:
    """``learn_expert_classes`` gives the class each trial predicted, as one by one gives
    it, up to the first refused trial (-1 from there on), and leaves the same state."""
    spec, labels, form = KINDS[kind]
    xs, cs = _stream(seed, n, len(labels), form)
    ys = [labels[c] for c in cs]
    alone, together = _learner(spec, labels, form), _learner(spec, labels, form)
    want = []
    for x, y in zip(xs, ys, strict=True):
        try:
            predicted, _ = alone.trial(x, y)
        except UpdateRefused:
            break
        want.append(predicted)
    got, updates, done = together.learn_expert_classes(_batch(xs, form), ys)  # type: ignore[attr-defined]
    assert got.dtype == np.int64 and got.shape == updates.shape == (n,)
    assert got[:done].tolist() == want and (got[done:] == -1).all()
    _same_state(alone, together)
