"""V-Combine's compiled trial (models.voting.compiled) against the composed reference path.

The compiled path must be an optimisation only: the same outcomes, predictions, member
counters and state, bit for bit, on every trial.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from models import registry
from models.core.instance import Experts
from models.inputs.datasets import MajorityProblem
from models.voting.vcombine import VCombine

K = 5
N = MajorityProblem().n_experts
LABELS = list(range(K))
#: A VR-Combine small enough to double and restart within a few hundred trials.
SMALL = {
    "kind": "vr-combine",
    "alphas": [1.05, 1.3],
    "ps": [2.0, 6.0],
    "h": 4,
    "r": 20,
    "window": 6,
    "restart_wait": 20,
    "size": 15,
    "max_updates": 3,
}


def _pair(spec: dict[str, Any], size: int = N) -> tuple[VCombine, VCombine]:
    fast = registry.build(spec, labels=LABELS, size=size)
    reference = registry.build(spec, labels=LABELS, size=size)
    assert isinstance(fast, VCombine) and isinstance(reference, VCombine)
    reference._compiled = False
    return fast, reference


def _state(learner: VCombine) -> str:
    return json.dumps(learner.export_state(), sort_keys=True)


def _agree(fast: VCombine, reference: VCombine, stream: list[tuple[Any, int]]) -> None:
    probe = stream[0][0]
    for t, (x, y) in enumerate(stream):
        assert fast.predict(x) == reference.predict(x), t
        assert fast.learn(x, y) == reference.learn(x, y), t
        assert fast.version_ == reference.version_, t
        if t % 97 == 0:
            np.testing.assert_array_equal(fast.vote_scores(probe), reference.vote_scores(probe))
            assert [m.counters() for m in fast.learners_] == [
                m.counters() for m in reference.learners_
            ]
    assert fast._fast is not None and reference._fast is None
    assert _state(fast) == _state(reference)


def _majority(count: int, seed: int, noise: float) -> list[tuple[Any, int]]:
    xs, ys, _ = MajorityProblem(noise=noise).sample(count, np.random.default_rng(seed))
    return list(zip(xs, ys.tolist(), strict=True))


@pytest.mark.parametrize(("seed", "noise"), [(0, 0.0), (1, 0.05), (2, 0.2), (3, 0.4)])
def test_small_vr_combine_matches_the_reference(seed: int, noise: float) -> None:
    fast, reference = _pair(SMALL)
    _agree(fast, reference, _majority(700, seed, noise))
    assert fast.restarts_ > 0 or fast.spacing_ > 1


@pytest.mark.parametrize(("seed", "noise"), [(7, 0.0), (8, 0.1)])
def test_vr_combine_preset_matches_the_reference(seed: int, noise: float) -> None:
    fast, reference = _pair({"kind": "vr-combine"})
    _agree(fast, reference, _majority(400, seed, noise))


@pytest.mark.parametrize(
    ("seed", "noise", "mistakes", "version", "member_mistakes", "internal_updates"),
    [(4, 0.1, 375, 1725, 33843, 197753), (5, 0.4, 1181, 2232, 84425, 317557)],
)
def test_vr_combine_preset_regression(
    seed: int, noise: float, mistakes: int, version: int, member_mistakes: int,
    internal_updates: int,
) -> None:  # fmt: skip
    """Figures of 2,500 trials recorded before the compiled path existed."""
    vr = registry.build({"kind": "vr-combine"}, labels=LABELS, size=N)
    assert isinstance(vr, VCombine)
    for x, y in _majority(2500, seed, noise):
        vr.learn(x, y)
    assert (vr.mistakes_, vr.version_) == (mistakes, version)
    assert int(vr.learner_mistakes_.sum()) == member_mistakes
    assert sum(int(m.internal_[2]) for m in vr.learners_[:31]) == internal_updates  # type: ignore[attr-defined]


def _sparse(count: int, seed: int, n: int) -> list[tuple[Any, int]]:
    """Sub-expert instances of 1 to 12 random votes, so the stores and the buffer widen and
    the buffer holds fewer non-zeros than there are sub-experts."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(count):
        m = int(rng.integers(1, 4 if t < 60 else 13))
        experts = np.sort(rng.choice(n, size=m, replace=False))
        classes = rng.integers(0, K, size=m)
        values = rng.choice([1.0, 0.5, 0.25], size=m)
        x = Experts(experts, classes, values)
        out.append((x, int(classes[0]) if rng.random() < 0.8 else int(rng.integers(K))))
    return out


def test_growing_sparse_instances_match_the_reference() -> None:
    fast, reference = _pair({**SMALL, "r": 40}, size=200)
    _agree(fast, reference, _sparse(600, 11, 200))


def test_state_round_trip_continues_on_either_path() -> None:
    stream = _majority(900, 12, 0.1)
    fast, reference = _pair(SMALL)
    for x, y in stream[:450]:
        fast.learn(x, y)
        reference.learn(x, y)
    doc = json.loads(json.dumps(fast.export_state()))
    copy_ = registry.from_state(doc)
    assert isinstance(copy_, VCombine) and copy_._fast is None
    reference.import_state(doc)
    assert not reference._compiled
    for x, y in stream[450:]:
        assert copy_.learn(x, y) == fast.learn(x, y) == reference.learn(x, y)
    assert _state(copy_) == _state(fast) == _state(reference)


@pytest.mark.parametrize(
    "params",
    [
        {"learners": [{"kind": "committee", "alpha": 1.1}]},
        {"learners": [{"kind": "subexpert", "learner": {"kind": "perceptron"}}]},
        {"learners": [{"kind": "averaging", "learner": {"kind": "committee"}}]},
        {"learners": [{"kind": "recycling", "learner": {"kind": "committee"}}]},
        {**SMALL, "vote_normalize": "l1"},
        {**SMALL, "select": "weighted-majority", "wm_update": "on_mistake"},
    ],
)
def test_other_members_take_the_reference_path(params: dict[str, Any]) -> None:
    spec = params if "kind" in params else {"kind": "v-combine", **params}
    v = registry.build(spec, labels=LABELS, size=N)
    assert isinstance(v, VCombine)
    for x, y in _majority(30, 13, 0.1):
        v.learn(x, y)
    assert v._fast is None and v._fast_tried


def test_weighted_majority_every_trial_is_compiled() -> None:
    fast, reference = _pair({**SMALL, "select": "weighted-majority", "beta": 0.7})
    _agree(fast, reference, _majority(300, 14, 0.2))


def test_recycled_members_alone_are_compiled() -> None:
    learners = [
        {"kind": "recycling", "size": 12, "max_updates": 2, "learner": spec}
        for spec in (
            {"kind": "subexpert", "learner": {"kind": "balanced-winnow", "alpha": 1.2}},
            {"kind": "subexpert", "learner": {"kind": "alma", "p": 3.0}},
        )
    ]
    fast, reference = _pair({"kind": "v-combine", "learners": learners, "h": 4, "window": 8})
    _agree(fast, reference, _majority(300, 15, 0.1))


def test_switching_paths_mid_run_keeps_them_equal() -> None:
    fast, reference = _pair(SMALL)
    stream = _majority(600, 16, 0.1)
    for t, (x, y) in enumerate(stream):
        fast._compiled = not 200 <= t < 400
        assert fast.learn(x, y) == reference.learn(x, y), t
    assert fast._fast is not None
    assert _state(fast) == _state(reference)
