"""The blocking client against the real service: every call, typed results, errors."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from _clientkit import FUSION, MAX_BODY, SPARSE

from committee_client import (
    BacktestRun,
    BatchItem,
    Client,
    CommitteeError,
    Conflict,
    Internal,
    InvalidInput,
    Job,
    Labelled,
    Learned,
    LearnerKind,
    Model,
    NotFound,
    Prediction,
    State,
    Stats,
    TooLarge,
    Window,
)


def folded(client: Client, name: str) -> Model:
    """The model once every applied trial is counted."""
    deadline = time.monotonic() + 10
    while True:
        m = client.model(name)
        if m.folded == m.version:
            return m
        if time.monotonic() > deadline:
            pytest.fail(f"{name}: {m.folded} of {m.version} trials counted after 10 s")
        time.sleep(0.02)


def votes(rng: np.random.Generator) -> dict[str, Any]:
    return {e: {y: float(rng.random()) for y in FUSION["labels"]} for e in ("cnn", "svm", "knn")}


def test_models_create_read_list_delete(client: Client, name: str) -> None:
    m = client.create_model(name, **FUSION)
    assert isinstance(m, Model) and m.name == name and m.version == 0
    assert m.labels == ["cat", "dog", "bird"] and m.label_ttl == 86400
    assert m.learner == FUSION["learner"] and m.input == {"experts": FUSION["experts"]}
    assert m.counters.mistakes == 0
    assert name in [x.name for x in client.models()]
    assert client.model(name) == m
    with pytest.raises(Conflict, match="already exists") as e:
        client.create_model(name, **FUSION)
    assert e.value.status == 409 and "already exists" in e.value.detail
    assert client.delete_model(name) is None
    with pytest.raises(NotFound, match=name) as nf:
        client.model(name)
    assert nf.value.status == 404
    with pytest.raises(NotFound):
        client.delete_model(name)


def test_learner_by_kind_and_ttl(client: Client, name: str) -> None:
    m = client.create_model(
        name, labels=[0, 1], attributes={"n_features": 4}, learner="winnow", label_ttl=60
    )
    assert m.learner == {"kind": "winnow"} and m.label_ttl == 60 and m.labels == [0, 1]


def test_learners(client: Client) -> None:
    kinds = {k.kind: k for k in client.learners()}
    assert all(isinstance(k, LearnerKind) for k in kinds.values())
    assert {"winnow", "balanced-winnow", "committee", "alma", "vr-combine", "ecoc"} <= set(kinds)
    alpha = {p.name: p for p in kinds["committee"].parameters}["alpha"]
    assert alpha.default == 1.2 and "> 1" in alpha.expected


def test_health(client: Client) -> None:
    assert client.alive() and client.ready()


def test_predict_label_learn(client: Client, name: str) -> None:
    client.create_model(name, **FUSION)
    inst = {"experts": {"cnn": "dog", "svm": {"cat": 3, "dog": 1}}}
    p = client.predict(name, inst)
    assert isinstance(p, Prediction) and p.model_version == 0
    assert p.trial_id and set(p.scores) == {"cat", "dog", "bird"}
    assert p.label == max(p.scores, key=lambda y: p.scores[y])
    got = client.label(name, p.trial_id, "bird")
    assert got == Labelled(
        trial_id=p.trial_id, predicted=p.label, label="bird", mistake=True, updated=True
    )
    assert client.label(name, p.trial_id, "bird") == got  # the same label: the same answer
    with pytest.raises(Conflict, match="already labelled 'bird'"):
        client.label(name, p.trial_id, "cat")
    learned = client.learn(name, inst, "bird")
    assert isinstance(learned, Learned) and learned.label == "bird"
    m = folded(client, name)
    assert m.version == 2 and m.counters.labelled == 1 and m.counters.learned == 1


def test_trial_ids_given_and_untracked(client: Client, name: str) -> None:
    client.create_model(name, **FUSION)
    inst = {"experts": {"svm": "bird"}}
    first = client.predict(name, inst, trial_id="order-17")
    assert first.trial_id == "order-17"
    assert client.predict(name, inst, trial_id="order-17") == first
    with pytest.raises(Conflict, match="order-17"):
        client.predict(name, {"experts": {"svm": "cat"}}, trial_id="order-17")
    untracked = client.predict(name, inst, track=False)
    assert untracked.trial_id is None and untracked.label == "bird"
    assert client.model(name).counters.predictions == 1


def test_labels_keep_their_type(client: Client, name: str) -> None:
    client.create_model(name, **SPARSE)
    got = client.learn(name, {"features": {"3": 1.0}}, -1)
    assert got.label == -1 and isinstance(got.predicted, int)
    # numpy arrays and scalars are sent as plain JSON
    dense = np.zeros(1000)
    dense[7] = 1
    p = client.predict(name, {"features": dense})
    assert p.label in (1, -1)
    assert client.label(name, p.trial_id or "", np.int64(1).item()).label == 1


def test_batches(client: Client, name: str) -> None:
    client.create_model(name, **FUSION)
    rng = np.random.default_rng(0)
    xs: list[dict[str, Any]] = [{"experts": votes(rng)} for _ in range(5)]
    xs[2] = {"experts": {"ghost": "cat"}}
    out = client.predict_batch(name, xs, trial_ids=[None, "b-1", None, None, None])
    assert all(isinstance(o, BatchItem) for o in out)
    assert [o.ok for o in out] == [True, True, False, True, True]
    assert out[1].unwrap().trial_id == "b-1"
    error = out[2].error
    assert error is not None and error.status == 422 and error.field == "items.2.instance"
    with pytest.raises(InvalidInput) as e:
        out[2].unwrap()
    assert e.value.field == "items.2.instance"
    ids = [o.unwrap().trial_id or "" for o in out if o.ok]
    pairs = [(t, "dog") for t in ids]
    pairs.insert(1, ("missing", "dog"))
    pairs.append((ids[0], "cat"))
    got = client.label_batch(name, pairs)
    assert [o.error.status if o.error else 200 for o in got] == [200, 404, 200, 200, 200, 409]
    assert [o.unwrap().trial_id for o in got if o.ok] == ids
    with pytest.raises(NotFound):
        got[1].unwrap()
    with pytest.raises(Conflict):
        got[-1].unwrap()
    learned = client.learn_batch(name, [({"experts": votes(rng)}, "bird") for _ in range(4)])
    assert all(o.unwrap().label == "bird" for o in learned)
    assert folded(client, name).version == 8
    untracked = client.predict_batch(name, [{"experts": votes(rng)}], track=False)
    assert untracked[0].unwrap().trial_id is None
    with pytest.raises(ValueError, match="2 trial ids for 1 instances"):
        client.predict_batch(name, [{}], trial_ids=["a", "b"])
    with pytest.raises(InvalidInput, match="items"):
        client.learn_batch(name, [])


def test_state_export_and_import(client: Client, name: str) -> None:
    src, dst = name, name + "-copy"
    client.create_model(src, **FUSION)
    client.create_model(dst, **FUSION)
    rng = np.random.default_rng(2)
    client.learn_batch(src, [({"experts": votes(rng)}, "cat") for _ in range(30)])
    exported = client.state(src)
    assert isinstance(exported, State) and exported.model_version == 30
    imported = client.put_state(dst, exported)
    assert imported.model_version == 1 and imported.state == exported.state
    probe = {"experts": votes(rng)}
    a = client.predict(src, probe, track=False)
    assert client.predict(dst, probe, track=False).scores == a.scores
    assert client.put_state(dst, exported.state).model_version == 2  # a plain mapping too
    with pytest.raises(InvalidInput) as e:
        client.put_state(dst, dict(exported.state, kind="perceptron"))
    assert e.value.field is not None and e.value.field.startswith("state")


@pytest.mark.parametrize(
    ("instance", "field", "words"),
    [
        ({"features": {"1000": 1.0}}, "instance", "1000"),
        ({"features": [0.0] * 999 + ["a"]}, "instance", "number"),
        ({"colour": "red"}, "instance", "colour"),
        ({"features": {"5": float("nan")}}, "instance", "finite"),
    ],
)
def test_invalid_input_names_the_field(
    client: Client, name: str, instance: dict[str, Any], field: str, words: str
) -> None:
    client.create_model(name, **SPARSE)
    with pytest.raises(InvalidInput, match=words) as e:
        client.learn(name, instance, 1)
    assert e.value.status == 422 and e.value.field is not None
    assert e.value.field.startswith(field)
    assert isinstance(e.value.detail, list) and e.value.errors[0][0] == e.value.field


def test_invalid_model_and_label(client: Client, name: str) -> None:
    with pytest.raises(InvalidInput) as e:
        client.create_model(name, **{**FUSION, "learner": {"kind": "committee", "alpha": 0.5}})
    assert e.value.field is not None and "alpha" in e.value.field
    with pytest.raises(InvalidInput) as bad_name:
        client.create_model("bad name!", **FUSION)
    assert bad_name.value.field == "name"
    client.create_model(name, **SPARSE)
    with pytest.raises(InvalidInput, match="unknown label 7") as label:
        client.learn(name, {}, 7)
    assert label.value.field == "label"
    with pytest.raises(InvalidInput) as tid:
        client.predict(name, {}, trial_id="has space")
    assert tid.value.field == "trial_id"


def test_unknown_and_expired_trials(client: Client, name: str) -> None:
    client.create_model(name, **FUSION, label_ttl=0.2)
    with pytest.raises(NotFound, match="nope"):
        client.label(name, "nope", "cat")
    p = client.predict(name, {"experts": {"knn": "cat"}})
    time.sleep(0.3)
    with pytest.raises(NotFound, match="deadline"):
        client.label(name, p.trial_id or "", "cat")
    with pytest.raises(NotFound, match="ghost"):
        client.predict("ghost", {})


def test_too_large(client: Client, name: str) -> None:
    client.create_model(name, **SPARSE)
    big = {"features": {str(i): 1.0 for i in range(MAX_BODY // 8)}}
    with pytest.raises(TooLarge, match="at most") as e:
        client.learn(name, big, 1)
    assert e.value.status == 413
    assert isinstance(e.value, CommitteeError)


def test_names_are_quoted(client: Client) -> None:
    with pytest.raises(CommitteeError) as e:
        client.model("a/b")
    assert e.value.status in (404, 422)


def test_stats(client: Client, name: str) -> None:
    client.create_model(name, **FUSION)
    rng = np.random.default_rng(5)
    learned = client.learn_batch(name, [({"experts": votes(rng)}, "cat") for _ in range(20)])
    client.predict(name, {"experts": votes(rng)})
    deadline = time.monotonic() + 15
    while True:
        s = client.stats(name)
        if s.folded == s.version == s.summary_version or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert isinstance(s, Stats) and isinstance(s.window, Window)
    mistakes = sum(o.unwrap().mistake for o in learned)
    assert (s.name, s.version, s.learned, s.pending, s.predictions) == (name, 20, 20, 1, 1)
    assert s.mistakes == mistakes and s.error_rate == mistakes / 20
    assert sum(s.confusion["cat"].values()) == 20
    assert s.curve[-1] == (20, mistakes)
    assert s.window.trials == 20 and s.window.mistakes == mistakes
    assert s.experts is not None and abs(sum(s.experts.values()) - 1) < 1e-9
    assert s.internal is None and s.learners is None and s.leader is None
    with pytest.raises(NotFound):
        client.stats(name + "-none")


def test_recycling_stats_are_typed(client: Client, name: str) -> None:
    learner = {"kind": "recycling", "size": 5, "learner": {"kind": "committee"}}
    client.create_model(name, **{**FUSION, "learner": learner})
    rng = np.random.default_rng(6)
    client.learn_batch(name, [({"experts": votes(rng)}, "dog") for _ in range(10)])
    deadline = time.monotonic() + 15
    s = client.stats(name)
    while s.internal is None and time.monotonic() < deadline:
        time.sleep(0.05)
        s = client.stats(name)
    assert isinstance(s.internal, Internal) and s.internal.trials >= 10


def test_live_changes(client: Client, name: str) -> None:
    client.create_model(
        name, labels=["a", "b"], attributes={"feature_names": ["x"]}, learner="perceptron"
    )
    m = client.add_features(name, ["y"])
    assert m.input["attributes"]["feature_names"] == ["x", "y"]
    assert client.learn(name, {"features": {"y": 1.0}}, "b").mistake
    with pytest.raises(InvalidInput) as e:
        client.add_labels(name, ["c"])
    assert e.value.field == "learner"
    with pytest.raises(InvalidInput) as e:
        client.change_experts(name, add=["clf"])
    assert e.value.field == "experts"


def test_fork_and_versions(client: Client, name: str) -> None:
    client.create_model(name, **FUSION)
    for _ in range(3):
        client.learn(name, {"experts": {"cnn": "dog"}}, "dog")
    assert client.versions(name)["restorable"] == [{"from": 0, "to": 3}]
    fork = client.fork_model(f"{name}-f", name, version=2)
    assert fork.version == 1 and fork.labels == FUSION["labels"]
    assert client.state(f"{name}-f").state != client.state(name).state  # 2 trials, not 3
    other = client.fork_model(f"{name}-wm", name, learner="weighted-majority")
    assert other.learner == {"kind": "weighted-majority"}
    with pytest.raises(InvalidInput) as e:
        client.fork_model(f"{name}-x", name, version=9)
    assert e.value.field == "from.version"
    back = client.rollback(name, 2)
    assert back.version == 4 and client.state(name).state == client.state(f"{name}-f").state
    with pytest.raises(InvalidInput) as e:
        client.rollback(name, 99)
    assert e.value.field == "version"


def test_backtest_and_its_job(client: Client, name: str) -> None:
    client.create_model(name, **FUSION)
    rng = np.random.default_rng(8)
    client.learn_batch(name, [({"experts": votes(rng)}, "dog") for _ in range(40)])
    job = client.backtest(name, ["weighted-majority", FUSION["learner"]], from_version=0)
    assert isinstance(job, Job) and job.status == "done" and job.result is not None
    model, wm, own = job.result.model, *job.result.candidates
    assert isinstance(model, BacktestRun) and model.trials == wm.trials == own.trials == 40
    assert wm.learner == {"kind": "weighted-majority"}
    assert own.mistakes == model.mistakes and own.curve == model.curve
    assert client.job(job.id) == job
    # one that answers before it ends is followed to its end
    started = client.backtest(name, "weighted-majority", wait=0)
    assert started.running and started.result is None
    ended = client.wait_job(started.id, timeout=60, every=0.05)
    assert ended.status == "done" and ended.result is not None
    assert ended.result.candidates[0].mistakes == wm.mistakes
    with pytest.raises(InvalidInput) as e:
        client.backtest(name, "perceptron")
    assert e.value.field == "learner.kind"
    with pytest.raises(InvalidInput) as e:
        client.backtest(name, "committee", from_version=99)
    assert e.value.field == "from_version"
    with pytest.raises(NotFound):
        client.job("0" * 32)
