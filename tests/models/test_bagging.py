"""On-line bagging and boosting (Oza & Russell 2001)."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import numpy as np
import pytest

from models import registry
from models.core.instance import Experts, InvalidInstance
from models.core.learner import Learner
from models.core.params import InvalidParameter
from models.core.state import InvalidState, encode_array
from models.ensembles.bagging import (
    OnlineBagging,
    OnlineBoosting,
    boosting_scores,
    boosting_weights,
    trial_rng,
)
from models.ensembles.ecoc import ECOC


@pytest.fixture(autouse=True)
def _registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """clone() and from_state() build through the registry."""
    for cls in (OnlineBagging, OnlineBoosting, ECOC):
        monkeypatch.setitem(registry.KINDS, cls.kind, cls)


def _state(learner: Learner) -> str:
    return json.dumps(learner.export_state(), sort_keys=True)


def _separable(n: int, seed: int, size: int = 12) -> list[tuple[np.ndarray, int]]:
    """Noise-free linearly separable: +1 iff x0 + x1 + x2 >= 2 (a constant feature last)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = (rng.random(size) < 0.5).astype(float)
        x[-1] = 1.0
        out.append((x, 1 if x[:3].sum() >= 2 else -1))
    return out


def _bagger(**kwargs: Any) -> OnlineBagging:
    params: dict[str, Any] = {"learner": {"kind": "perceptron"}, "labels": [1, -1]}
    params.update(n_features=12, n_models=5, seed=3)
    params.update(kwargs)
    return OnlineBagging(**params)


# -- the Poisson(1) draws of on-line bagging --------------------------------------------------


def test_draws_are_reproducible_from_the_seed_and_trial() -> None:
    a, b, c = _bagger(seed=11), _bagger(seed=11), _bagger(seed=12)
    for t in (0, 1, 5, 10**6):
        np.testing.assert_array_equal(a.draws(t), b.draws(t))
        np.testing.assert_array_equal(a.draws(t), trial_rng(11, t).poisson(1.0, 5))
    assert any(not np.array_equal(a.draws(t), c.draws(t)) for t in range(10))
    assert any(not np.array_equal(a.draws(t), a.draws(t + 1)) for t in range(10))


def test_draws_are_poisson_one() -> None:
    bag = _bagger(n_models=10, seed=2)
    k = np.concatenate([bag.draws(t) for t in range(5000)])  # 50 000 draws
    assert abs(k.mean() - 1.0) < 0.02  # the standard error is 0.0045
    assert abs(k.var() - 1.0) < 0.05
    assert abs(np.mean(k == 0) - math.exp(-1)) < 0.01


def test_each_copy_sees_each_trial_k_times() -> None:
    bag = _bagger()
    stream = _separable(200, seed=1)
    for x, y in stream:
        bag.learn(x, y)
    seen = np.sum([bag.draws(t) for t in range(len(stream))], axis=0)
    assert [m.trials_ for m in bag.models_] == seen.tolist()


# -- bagging -------------------------------------------------------------------------------------


@pytest.mark.parametrize("vote", ["majority", "scores"])
def test_bagging_of_perceptrons_learns(vote: str) -> None:
    bag = _bagger(n_models=7, vote=vote)
    late = [bag.learn(x, y).mistake for x, y in _separable(3000, seed=2)][-1000:]
    assert np.mean(late) < 0.03, np.mean(late)


def test_majority_vote_ties_go_to_the_smallest_class() -> None:
    bag = _bagger(n_models=2, labels=["p", "n"])
    bag.models_[0].w_[0] = 1.0  # type: ignore[attr-defined]
    bag.models_[1].w_[0] = -1.0  # type: ignore[attr-defined]
    x = {0: 1.0}
    assert bag.scores(x).tolist() == [1.0, 1.0] and bag.predict(x) == "p"
    bag.models_[0].w_[0] = -2.0  # type: ignore[attr-defined]
    assert bag.scores(x).tolist() == [0.0, 2.0] and bag.predict(x) == "n"
    scores = _bagger(n_models=2, vote="scores")
    scores.models_[0].w_[0], scores.models_[1].w_[0] = 3.0, -1.0  # type: ignore[attr-defined]
    assert scores.scores(x).tolist() == [2.0, -2.0] and scores.predict(x) == 1


def test_mistake_is_the_ensembles_and_updated_any_copys() -> None:
    bag = _bagger()
    for t, (x, y) in enumerate(_separable(300, seed=3)):
        predicted = bag.predict(x)
        before = [m.updates_ for m in bag.models_]
        out = bag.learn(x, y)
        assert out.mistake == (predicted != y), t
        after = [m.updates_ for m in bag.models_]
        assert out.updated == (after != before), t


def test_replaying_a_stream_replays_the_ensemble() -> None:
    stream = _separable(400, seed=4)
    a, b = _bagger(), _bagger()
    assert [a.learn(x, y) for x, y in stream] == [b.learn(x, y) for x, y in stream]
    assert _state(a) == _state(b)
    # stopped half way, saved and restored: the trial counter carries the draws on
    c = _bagger()
    for x, y in stream[:150]:
        c.learn(x, y)
    d = registry.from_state(json.loads(json.dumps(c.export_state())))
    for x, y in stream[150:]:
        d.learn(x, y)
    assert _state(d) == _state(a)


def test_bagging_round_trip_through_json_is_exact() -> None:
    bag = _bagger(vote="scores")
    stream = _separable(300, seed=5)
    for x, y in stream[:200]:
        bag.learn(x, y)
    copy_ = registry.from_state(json.loads(json.dumps(bag.export_state())))
    assert _state(copy_) == _state(bag) and copy_.counters() == bag.counters()
    for x, y in stream[200:]:
        np.testing.assert_array_equal(copy_.scores(x), bag.scores(x))
        assert copy_.learn(x, y) == bag.learn(x, y)
    assert _state(copy_) == _state(bag)


def test_a_bad_model_leaves_the_ensemble_unchanged() -> None:
    bag = _bagger()
    for x, y in _separable(100, seed=6):
        bag.learn(x, y)
    models, before = list(bag.models_), _state(bag)
    doc = bag.export_state()
    for corrupt in ("nan", "missing", "extra"):
        bad = copy.deepcopy(doc)
        if corrupt == "nan":
            bad["children"]["model:4"]["arrays"]["w_"] = encode_array(np.full(12, np.nan))
        elif corrupt == "missing":
            del bad["children"]["model:0"]
        else:
            bad["children"]["model:5"] = bad["children"]["model:0"]
        with pytest.raises(InvalidState):
            bag.import_state(bad)
        assert bag.models_ == models and _state(bag) == before


def test_bagging_of_sub_expert_learners() -> None:
    spec = {"kind": "bagging", "learner": {"kind": "committee"}, "n_models": 3}
    bag = registry.build(spec, labels=["a", "b", "c"], size=4)
    assert isinstance(bag, OnlineBagging)
    assert bag.input_kind == "experts" and bag.n_experts == 4 and bag.n_features is None
    assert bag.input_size == 4 and registry.build(bag.spec()).spec() == bag.spec()
    rng = np.random.default_rng(0)
    for _ in range(100):
        y = int(rng.integers(3))
        votes = [y, y, int(rng.integers(3)), int(rng.integers(3))]
        bag.learn(Experts.one_hot(votes), "abc"[y])
    assert bag.weights().shape == (4, 3)
    assert bag.predict(Experts.one_hot([1, 1, 0, 2])) == "b"
    with pytest.raises(InvalidInstance):
        bag.learn([0.5, 0.5], "a")  # attributes for a sub-expert ensemble
    with pytest.raises(InvalidInstance):
        bag.snapshot().scores(Experts([0], [3], [1.0]))  # a class beyond the labels


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n_features": None}, "n_features"),
        ({"n_experts": 4}, "n_features"),  # both sizes
        ({"learner": {"kind": "committee"}}, "n_experts"),  # n_features for a sub-expert learner
        ({"learner": {"kind": "nope"}}, "learner.kind"),
        ({"learner": {"kind": "perceptron", "eta": -1.0}}, "learner.eta"),
        ({"labels": ["a", "b", "c"]}, "learner.labels"),  # the perceptron is binary
        ({"n_models": 0}, "n_models"),
        ({"vote": "loudest"}, "vote"),
        ({"seed": -2}, "seed"),
        ({"n_features": 2**26, "n_models": 2}, "n_features"),
    ],
)
def test_bad_bagging_parameters(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        _bagger(**kwargs)
    assert info.value.name == name


# -- boosting ------------------------------------------------------------------------------------


def _booster(**kwargs: Any) -> OnlineBoosting:
    params: dict[str, Any] = {"learner": {"kind": "perceptron"}, "labels": [1, -1]}
    params.update(n_features=12, n_models=5, seed=3)
    params.update(kwargs)
    return OnlineBoosting(**params)


class ReferenceBoosting:
    """Oza & Russell's on-line boosting written out step by step, on perceptron copies,
    with the same draws."""

    def __init__(self, n_models: int, seed: int) -> None:
        self.models = [registry.build({"kind": "perceptron"}, size=12) for _ in range(n_models)]
        self.sc, self.sw = [0.0] * n_models, [0.0] * n_models
        self.seed, self.t = seed, 0

    def predict(self, x: Any) -> int:
        total: dict[Any, float] = {1: 0.0, -1: 0.0}
        perfect: dict[Any, int] = {1: 0, -1: 0}
        for m, h in enumerate(self.models):
            sc, sw = self.sc[m], self.sw[m]
            if sc > 0 and sw == 0:
                perfect[h.predict(x)] += 1
            elif sw > 0 and sw / (sc + sw) < 0.5:
                eps = sw / (sc + sw)
                total[h.predict(x)] += math.log((1 - eps) / eps)
        if perfect[1] != perfect[-1]:
            return 1 if perfect[1] > perfect[-1] else -1
        return 1 if total[1] >= total[-1] else -1

    def learn(self, x: Any, y: int) -> None:
        rng = trial_rng(self.seed, self.t)
        lam = 1.0
        for m, h in enumerate(self.models):
            for _ in range(int(rng.poisson(lam))):
                h.learn(x, y)
            if h.predict(x) == y:
                self.sc[m] += lam
                lam = lam * (self.sc[m] + self.sw[m]) / (2 * self.sc[m])
            else:
                self.sw[m] += lam
                lam = lam * (self.sc[m] + self.sw[m]) / (2 * self.sw[m])
        self.t += 1


def test_boosting_follows_oza_russell() -> None:
    boost, ref = _booster(n_models=4, seed=8), ReferenceBoosting(4, seed=8)
    for t, (x, y) in enumerate(_separable(400, seed=7)):
        assert boost.predict(x) == ref.predict(x), t
        boost.learn(x, y)
        ref.learn(x, y)
        np.testing.assert_allclose(boost.lambda_sc_, ref.sc, rtol=1e-12)
        np.testing.assert_allclose(boost.lambda_sw_, ref.sw, rtol=1e-12)
        for a, b in zip(boost.models_, ref.models, strict=True):
            np.testing.assert_array_equal(a.weights(), b.weights())  # type: ignore[attr-defined]


def test_boosting_first_trial_by_hand() -> None:
    boost = _booster(n_models=2, seed=0, n_features=2)
    assert trial_rng(0, 0).poisson(1.0) == 1  # model 0 learns the trial once
    assert boost.learn([1.0, 0.0], -1) == (True, True)
    # model 0 is then right: sc = 1, lambda = 1 * (1 + 0) / (2 * 1) = 1/2; model 1 is wrong
    assert boost.lambda_sc_.tolist() == [1.0, 0.0]
    assert boost.lambda_sw_.tolist() == [0.0, 0.5]


def test_boosting_learns() -> None:
    boost = _booster(n_models=5)
    late = [boost.learn(x, y).mistake for x, y in _separable(3000, seed=8)][-1000:]
    assert np.mean(late) < 0.03, np.mean(late)


def test_boosting_vote_weights() -> None:
    sc = np.array([3.0, 1.0, 2.0, 0.0, 5.0])
    sw = np.array([1.0, 1.0, 0.0, 0.0, 4.0])
    w, perfect = boosting_weights(sc, sw)
    # eps = 1/4 -> log 3; eps = 1/2 skipped; eps = 0 perfect; unscored skipped; eps = 4/9
    np.testing.assert_allclose(w, [math.log(3), 0.0, 0.0, 0.0, math.log(5 / 4)], rtol=1e-15)
    assert perfect.tolist() == [False, False, True, False, False]
    votes = np.array([0, 1, 1, 0, 0])
    s = boosting_scores(votes, w, perfect, 2)
    assert int(np.argmax(s)) == 1  # the one perfect model outvotes log 3 + log 5/4
    no_perfect = boosting_scores(votes, w, np.zeros(5, dtype=bool), 2)
    np.testing.assert_allclose(no_perfect, [math.log(3) + math.log(5 / 4), 0.0])
    tie = boosting_scores(
        np.array([1, 0, 0]), np.array([0.0, 2.0, 0.0]), np.array([1, 0, 1], bool), 2
    )
    assert s.shape == (2,) and tie[0] > tie[1]  # a perfect tie is broken by the finite weights


def test_boosting_lambdas_round_trip_exactly() -> None:
    boost = _booster()
    stream = _separable(300, seed=9)
    for x, y in stream[:200]:
        boost.learn(x, y)
    assert (boost.lambda_sc_ > 0).all() and not float(boost.lambda_sc_[1]).is_integer()
    doc = json.loads(json.dumps(boost.export_state()))
    copy_ = registry.from_state(doc)
    assert isinstance(copy_, OnlineBoosting)
    assert copy_.lambda_sc_.tobytes() == boost.lambda_sc_.tobytes()
    assert copy_.lambda_sw_.tobytes() == boost.lambda_sw_.tobytes()
    assert _state(copy_) == _state(boost)
    for x, y in stream[200:]:
        np.testing.assert_array_equal(copy_.scores(x), boost.scores(x))
        assert copy_.learn(x, y) == boost.learn(x, y)
    assert _state(copy_) == _state(boost)


def test_negative_lambdas_are_rejected() -> None:
    boost = _booster()
    for x, y in _separable(50, seed=10):
        boost.learn(x, y)
    before = _state(boost)
    for name in ("lambda_sc_", "lambda_sw_"):
        doc = boost.export_state()
        doc["arrays"][name] = encode_array(np.array([1.0, 2.0, -1.0, 0.0, 1.0]))
        with pytest.raises(InvalidState, match="non-negative"):
            boost.import_state(doc)
        assert _state(boost) == before


def test_max_repeats_caps_the_work_of_a_trial() -> None:
    boost = _booster(max_repeats=1, n_models=6)
    stream = _separable(300, seed=11)
    for x, y in stream:
        boost.learn(x, y)
    assert all(m.trials_ <= len(stream) for m in boost.models_)
    assert max(m.trials_ for m in boost.models_) > 0


def test_boosting_updated_counts_vote_weight_changes() -> None:
    boost = _booster()
    for x, y in _separable(200, seed=12):
        before = ([m.updates_ for m in boost.models_], *boost.vote_weights())
        out = boost.learn(x, y)
        after = ([m.updates_ for m in boost.models_], *boost.vote_weights())
        changed = before[0] != after[0] or any(
            not np.array_equal(a, b) for a, b in zip(before[1:], after[1:], strict=True)
        )
        assert out.updated == changed


# -- the common contract, run here until these kinds join the shared suite ------------------


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "bagging", "learner": {"kind": "balanced-winnow", "alpha": 1.5}, "n_models": 4},
        {"kind": "bagging", "learner": {"kind": "ecoc", "learner": {"kind": "perceptron"}}},
        {"kind": "boosting", "learner": {"kind": "winnow"}, "n_models": 4, "seed": 5},
    ],
)
def test_clone_determinism_and_snapshot(spec: dict[str, Any]) -> None:
    labels = [1, -1] if spec["learner"]["kind"] != "ecoc" else [1, -1, 0]
    stream = [
        (x, y if y == 1 or len(labels) == 2 or i % 3 else 0)
        for i, (x, y) in enumerate(_separable(300, seed=13))
    ]

    def trained() -> Learner:
        learner = registry.build(spec, labels=labels, size=12)
        for x, y in stream[:200]:
            learner.learn(x, y)
        return learner

    learner = trained()
    assert _state(trained()) == _state(learner)
    clone = learner.clone()
    assert clone.spec() == learner.spec()
    assert clone.counters() == {"trials": 0, "mistakes": 0, "updates": 0, "version": 0}
    snap = learner.snapshot()
    held_out = [x for x, _ in stream[200:]]
    predictions = [learner.predict(x) for x in held_out]
    assert [snap.predict(x) for x in held_out] == predictions
    for x in held_out:
        np.testing.assert_array_equal(snap.scores(x), learner.scores(x))
        assert learner.predict(x) == labels[int(np.argmax(learner.scores(x)))]
    with pytest.raises(ValueError):
        snap.weights[0] = 1.0  # type: ignore[attr-defined]
    with pytest.raises(InvalidInstance):
        snap.scores({12: 1.0})
    for x, y in stream[200:]:
        learner.learn(x, y)
    assert [snap.predict(x) for x in held_out] == predictions
