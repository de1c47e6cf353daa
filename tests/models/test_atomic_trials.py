"""Trials are all or nothing: a refused update leaves a learner exactly as it was.

Each configuration below has a member (Balanced Winnow with a threshold and a huge alpha,
Multi-class Winnow with a huge alpha, or a sub-expert Balanced Winnow whose alpha outgrows
a shift) that refuses an update within a short seeded stream. At the first refusal the
learner must raise :class:`UpdateRefused` carrying the class it predicted, keep the state
it had before the trial, and go on exactly as a learner that never saw that trial.
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from typing import Any

import numpy as np
import pytest

from models import registry
from models.core.learner import Learner, UpdateRefused
from models.inputs.datasets import MajorityProblem
from models.voting.vcombine import VCombine

BW = {"kind": "balanced-winnow", "alpha": 1e150, "theta": 0.5}
#: Multi-class Winnow's weights collapse under random labels before one passes 1e280 by
#: steps; an alpha this large refuses the first promotion instead.
MCW = {"kind": "multiclass-winnow", "alpha": 1e305}
#: At threshold 0 Balanced Winnow shifts its weights, but a factor above 2**600 outgrows that.
SBW = {"kind": "subexpert", "learner": {"kind": "balanced-winnow", "alpha": 1e250}}
RB = {"kind": "recycling", "learner": BW, "size": 6, "max_updates": 3}
MIXED = [{"kind": "perceptron"}, RB, {"kind": "averaging", "learner": RB}]
VR = {
    "kind": "vr-combine",
    "alphas": [1.1, 1e250],
    "ps": [2.0],
    "h": 4,
    "r": 10,
    "window": 4,
    "restart_wait": 10,
    "size": 8,
    "max_updates": 3,
}

#: id: (spec, labels, input: "attributes", "experts" (dense votes) or "one-hot" votes)
CONFIGS: dict[str, tuple[dict[str, Any], list[Hashable], str]] = {
    "balanced-winnow": (BW, [1, -1], "attributes"),
    "multiclass-winnow": (MCW, [0, 1, 2], "experts"),
    "subexpert": (SBW, [0, 1, 2], "one-hot"),
    "recycling": (RB, [1, -1], "attributes"),
    "recycling-multiclass": ({**RB, "learner": MCW}, [0, 1, 2], "experts"),
    "recycling-generic": (
        {**RB, "learner": {"kind": "averaging", "learner": BW}},
        [1, -1],
        "attributes",
    ),
    "averaging": ({"kind": "averaging", "learner": BW}, [1, -1], "attributes"),
    "v-combine": ({"kind": "v-combine", "learners": MIXED, "h": 4}, [1, -1], "attributes"),
    "v-combine-multiclass": (
        {"kind": "v-combine", "learners": [{"kind": "committee"}, MCW], "h": 4},
        [0, 1, 2],
        "experts",
    ),
    "ecoc": ({"kind": "ecoc", "learner": BW}, [0, 1, 2], "attributes"),
    "bagging": (
        {"kind": "bagging", "learner": BW, "n_models": 3, "seed": 1},
        [1, -1],
        "attributes",
    ),
    "boosting": ({"kind": "boosting", "learner": MCW, "n_models": 3}, [0, 1, 2], "experts"),
    "bagging-of-recycling": (
        {"kind": "bagging", "learner": RB, "n_models": 3},
        [1, -1],
        "attributes",
    ),
    "bagging-of-v-combine": (
        {"kind": "bagging", "learner": {"kind": "v-combine", "learners": MIXED, "h": 4}},
        [1, -1],
        "attributes",
    ),
    "boosting-of-averaging": (
        {"kind": "boosting", "learner": {"kind": "averaging", "learner": BW}, "n_models": 3},
        [1, -1],
        "attributes",
    ),
    "vr-combine": (VR, list(range(MajorityProblem().k)), "experts"),
}
SIZE = {"attributes": 3, "experts": 6, "one-hot": 6}


def _state(learner: Learner) -> str:
    return json.dumps(learner.export_state(), sort_keys=True)


def _stream(labels: list[Hashable], form: str, n: int, seed: int) -> list[tuple[Any, Hashable]]:
    """Seeded trials: 0/1 attributes, or sub-expert votes (k values each)."""
    rng = np.random.default_rng(seed)
    k = len(labels)
    out = []
    for _ in range(n):
        if form == "attributes":
            x: Any = (rng.random(SIZE[form]) < 0.6).astype(float)
        elif form == "experts":
            x = rng.random((SIZE[form], k)).tolist()
        else:
            x = np.eye(k)[rng.integers(0, k, SIZE[form])].tolist()
        out.append((x, labels[int(rng.integers(k))]))
    return out


def _majority(n: int, seed: int) -> list[tuple[Any, Hashable]]:
    xs, ys, _ = MajorityProblem(noise=0.3).sample(n, np.random.default_rng(seed))
    return list(zip(xs, ys.tolist(), strict=True))


def _setup(name: str) -> tuple[dict[str, Any], list[Hashable], int, list[tuple[Any, Hashable]]]:
    spec, labels, form = CONFIGS[name]
    if name == "vr-combine":
        return spec, labels, MajorityProblem().n_experts, _majority(600, 5)
    return spec, labels, SIZE[form], _stream(labels, form, 400, 2)


def _build(spec: dict[str, Any], labels: list[Hashable], size: int) -> Learner:
    return registry.build(spec, labels=labels, size=size)


def _first_refusal(learner: Learner, stream: list[tuple[Any, Hashable]]) -> int:
    """Learn ``stream`` up to its first refused trial; check that trial; return its index."""
    for t, (x, y) in enumerate(stream):
        before, predicted = _state(learner), learner.predict(x)
        try:
            learner.learn(x, y)
        except UpdateRefused as exc:
            assert learner.labels[exc.predicted] == predicted, t
            assert _state(learner) == before, t
            return t
    raise AssertionError("no trial was refused: the configuration does not test anything")


def _outcome(learner: Learner, x: Any, y: Hashable) -> tuple[Any, ...]:
    try:
        return tuple(learner.trial(x, y))
    except UpdateRefused as exc:
        return ("refused", exc.predicted)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_refused_trial_is_undone_whole(name: str) -> None:
    spec, labels, size, stream = _setup(name)
    learner = _build(spec, labels, size)
    t = _first_refusal(learner, stream)
    twin = _build(spec, labels, size)  # never sees trial t
    for x, y in stream[:t]:
        twin.learn(x, y)
    assert _state(twin) == _state(learner)
    rest = stream[t + 1 :]
    assert [_outcome(learner, x, y) for x, y in rest] == [_outcome(twin, x, y) for x, y in rest]
    assert _state(learner) == _state(twin)


def test_the_refusal_is_an_overflow_error() -> None:
    """Existing ``except OverflowError`` / ``ArithmeticError`` clauses still catch it."""
    assert issubclass(UpdateRefused, OverflowError)
    assert UpdateRefused("refused", 1).predicted == 1


@pytest.mark.parametrize("name", ["v-combine", "v-combine-multiclass", "vr-combine"])
def test_compiled_and_reference_v_combine_refuse_alike(name: str) -> None:
    spec, labels, size, stream = _setup(name)
    fast, reference = _build(spec, labels, size), _build(spec, labels, size)
    assert isinstance(fast, VCombine) and isinstance(reference, VCombine)
    reference._compiled = False
    outcomes = [(_outcome(fast, x, y), _outcome(reference, x, y)) for x, y in stream]
    assert all(a == b for a, b in outcomes)
    assert any(a[0] == "refused" for a, _ in outcomes)
    assert _state(fast) == _state(reference)
    assert reference._fast is None
    if name == "vr-combine":  # its members run in the compiled loop
        assert fast._fast is not None


def test_a_recycled_internal_refusal_undoes_the_real_update() -> None:
    """The internal passes are part of the trial: their refusal undoes B's own update."""
    spec, labels, size, stream = _setup("recycling")
    learner = _build(spec, labels, size)
    internal = 0
    for x, y in stream:
        before = _state(learner)
        alone = registry.from_state(learner.learner_.export_state())  # type: ignore[attr-defined]
        try:
            learner.learn(x, y)
        except UpdateRefused:
            assert _state(learner) == before
            try:
                alone.learn(x, y)  # B alone accepts the real update: a pass refused
            except UpdateRefused:
                continue
            internal += 1
    assert internal > 0


@pytest.mark.parametrize("theta", [0.5, -0.5])
def test_learn_prefix_keeps_the_trials_before_the_refused_one(theta: float) -> None:
    spec, labels, size, stream = _setup("balanced-winnow")
    spec = {**spec, "theta": theta}
    one = _build(spec, labels, size)
    t = _first_refusal(one, stream)
    batch = _build(spec, labels, size)
    xs, ys = [x for x, _ in stream], [y for _, y in stream]
    mistakes, updates, done = batch.learn_prefix(xs, ys)  # type: ignore[attr-defined]
    assert done == t and not mistakes[t:].any() and not updates[t:].any()
    assert _state(batch) == _state(one)
    predicted = batch.predict(xs[t])
    many = _build(spec, labels, size)
    with pytest.raises(UpdateRefused) as refused:
        many.learn_many(xs, ys)
    assert many.labels[refused.value.predicted] == predicted
    assert _state(many) == _state(one)


def test_learners_that_never_refuse_take_no_checkpoint() -> None:
    """The hot path: no checkpoint (no copy of the state) for learners that cannot refuse."""
    plain = [
        {"kind": "balanced-winnow", "alpha": 1.5},
        {"kind": "perceptron"},
        {"kind": "recycling", "learner": {"kind": "perceptron"}},
        {"kind": "v-combine", "learners": [{"kind": "perceptron"}, {"kind": "alma"}]},
        {"kind": "ecoc", "learner": {"kind": "winnow"}},
    ]
    for spec in plain:
        labels = [0, 1, 2] if spec["kind"] == "ecoc" else [1, -1]
        learner = _build(spec, labels, 3)
        assert not learner.can_refuse()
        learner.checkpoint = None  # type: ignore[assignment,method-assign]
        for x, y in _stream(labels, "attributes", 30, 1):
            learner.learn(x, y)
    for spec, labels in ((BW, [1, -1]), (RB, [1, -1]), (SBW, [0, 1])):
        assert _build(spec, labels, 3).can_refuse()
