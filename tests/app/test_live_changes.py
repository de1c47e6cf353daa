"""Experts, features and labels added and retired on a live model: one entry in its log,
applied by every worker in its place, so a replay of the log is the model."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
from _procs import Service, assert_same_state, replay, wait_folded
from _workers import from_each_worker

FUSION = {
    "labels": ["cat", "dog", "bird"],
    "input": {"experts": {"expert_names": ["cnn", "svm", "rf"], "threshold_experts": True}},
    "learner": {"kind": "committee", "alpha": 1.3},
}


def _votes(rng: np.random.Generator, experts: list[str], labels: list[str]) -> dict[str, Any]:
    return {
        e: ({lab: float(rng.random()) for lab in labels} if rng.random() < 0.5 else labels[0])
        for e in experts
        if rng.random() < 0.8
    }


def _learn(c: httpx.Client, name: str, votes: dict[str, Any], label: str) -> httpx.Response:
    return c.post(f"/v1/models/{name}/learn", json={"instance": {"experts": votes}, "label": label})


def test_experts_join_and_retire_live_and_old_predictions_take_their_labels(
    client: httpx.Client, model_name: str, api_settings: Any
) -> None:
    c, name = client, model_name
    rng = np.random.default_rng(3)
    assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
    labels = FUSION["labels"]
    for _ in range(20):
        assert _learn(c, name, _votes(rng, ["cnn", "svm", "rf"], labels), "dog").status_code == 200
    before = c.post(
        f"/v1/models/{name}/predict", json={"instance": {"experts": {"svm": "cat", "rf": "dog"}}}
    )
    assert before.status_code == 200, before.text

    changed = c.post(f"/v1/models/{name}/experts", json={"add": ["vit"], "retire": ["svm"]})
    assert changed.status_code == 200, changed.text
    model = changed.json()
    assert model["input"]["experts"]["expert_names"] == ["cnn", "svm", "rf", "vit"]
    assert model["input"]["experts"]["retired"] == ["svm"]
    assert model["version"] == 21
    assert c.get(f"/v1/models/{name}").json()["input"] == model["input"]

    # the prediction made before the change takes its label, with the instance it had
    got = c.post(
        f"/v1/models/{name}/label", json={"trial_id": before.json()["trial_id"], "label": "cat"}
    )
    assert got.status_code == 200, got.text
    # the new expert votes; the retired one may not
    assert _learn(c, name, {"vit": "bird", "cnn": "bird"}, "bird").status_code == 200
    refused = _learn(c, name, {"svm": "bird"}, "bird")
    assert refused.status_code == 422
    assert "experts.svm" in refused.text and "retired" in refused.text
    # a name once used is never an expert's again
    again = c.post(f"/v1/models/{name}/experts", json={"add": ["svm"]})
    assert again.status_code == 422 and "experts.add[0]" in again.text, again.text

    labelled = c.post(f"/v1/models/{name}/labels", json={"add": ["fox"]})
    assert labelled.status_code == 200, labelled.text
    assert labelled.json()["labels"] == ["cat", "dog", "bird", "fox"]
    p = c.post(f"/v1/models/{name}/predict", json={"instance": {"experts": {"vit": "fox"}}})
    assert p.status_code == 200, p.text
    assert set(p.json()["scores"]) == {"cat", "dog", "bird", "fox"}
    assert _learn(c, name, {"vit": "fox", "rf": "fox"}, "fox").status_code == 200

    state = c.get(f"/v1/models/{name}/state").json()
    rep = replay(api_settings.redis_url, api_settings.key_prefix, name)
    assert [rep.kinds[s] for s in (21, 24)] == ["change", "change"]
    assert rep.model.space.config() == {
        "labels": ["cat", "dog", "bird", "fox"],
        **{k: v for k, v in c.get(f"/v1/models/{name}").json()["input"].items()},
    }
    assert_same_state(orjson.loads(rep.model.export()), state["state"])
    folded = wait_folded(c, name)
    assert folded["counters"]["quarantined"] == 0


def test_statistics_name_the_labels_added_live_and_after_a_rollback(
    client: httpx.Client, model_name: str
) -> None:
    c, name = client, model_name
    rng = np.random.default_rng(5)
    assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
    labels = list(FUSION["labels"])
    for new in ("fox", "owl"):
        for _ in range(6):
            y = labels[int(rng.integers(len(labels)))]
            assert _learn(c, name, _votes(rng, ["cnn", "rf"], labels), y).status_code == 200
        assert c.post(f"/v1/models/{name}/labels", json={"add": [new]}).status_code == 200
        labels.append(new)
        assert _learn(c, name, {"cnn": new}, new).status_code == 200
        p = c.post(f"/v1/models/{name}/predict", json={"instance": {"experts": {"rf": "cat"}}})
        assert c.post(
            f"/v1/models/{name}/label", json={"trial_id": p.json()["trial_id"], "label": new}
        ).is_success
    # back to a version before "owl" came: the labels added since stay
    assert c.post(f"/v1/models/{name}/rollback", json={"version": 8}).status_code == 200
    assert _learn(c, name, {"cnn": "owl"}, "owl").status_code == 200
    wait_folded(c, name)
    stats = c.get(f"/v1/models/{name}/stats").json()
    named = set(stats["confusion"]) | {p for row in stats["confusion"].values() for p in row}
    assert {"fox", "owl"} <= set(stats["confusion"]) and named <= set(labels)
    assert sum(n for row in stats["confusion"].values() for n in row.values()) > 12


def test_what_a_model_cannot_take_is_a_422_naming_it(client: httpx.Client, model_name: str) -> None:
    c, name = client, model_name
    binary = {
        "name": name,
        "labels": [1, -1],
        "input": {"attributes": {"feature_names": ["a", "b"]}},
        "learner": {"kind": "balanced-winnow"},
    }
    assert c.post("/v1/models", json=binary).status_code == 201
    cases = [
        ("labels", {"add": [2]}, "learner", "exactly 2"),
        ("experts", {"add": ["x"]}, "experts", "no experts"),
        ("features", {"add": ["a"]}, "features.add[0]", "a new feature name"),
        ("features", {"add": []}, "add", ""),
        ("features", {"drop": ["a"]}, "drop", ""),
        ("experts", {"add": ["x" * 300]}, "add", ""),
    ]
    for part, body, field, why in cases:
        r = c.post(f"/v1/models/{name}/{part}", json=body)
        assert r.status_code == 422, (part, body, r.text)
        assert field in r.text and why in r.text, (part, body, r.text)
    assert c.get(f"/v1/models/{name}").json()["version"] == 0  # nothing was logged
    grown = c.post(f"/v1/models/{name}/features", json={"add": ["c"]})
    assert grown.status_code == 200, grown.text
    assert grown.json()["input"]["attributes"]["feature_names"] == ["a", "b", "c"]
    learned = c.post(
        f"/v1/models/{name}/learn", json={"instance": {"features": {"c": 1.0}}, "label": -1}
    )
    assert learned.status_code == 200, learned.text
    missing = c.post("/v1/models/no-such-model/labels", json={"add": ["x"]})
    assert missing.status_code == 404


def test_a_retried_change_is_applied_once(client: httpx.Client, model_name: str) -> None:
    c, name = client, model_name
    assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
    headers = {"Idempotency-Key": f"add-{name}"}
    first = c.post(f"/v1/models/{name}/experts", json={"add": ["vit"]}, headers=headers)
    again = c.post(f"/v1/models/{name}/experts", json={"add": ["vit"]}, headers=headers)
    assert first.status_code == again.status_code == 200, again.text
    assert again.json()["version"] == first.json()["version"] == 1
    other = c.post(f"/v1/models/{name}/experts", json={"add": ["deit"]}, headers=headers)
    assert other.status_code == 409, other.text


@pytest.mark.parametrize(
    "learner",
    [
        {"kind": "committee", "alpha": 1.3},
        {
            "kind": "averaging",
            "learner": {"kind": "subexpert", "learner": {"kind": "balanced-winnow"}},
        },
    ],
    ids=["committee", "averaged-subexpert-bw"],
)
def test_four_workers_under_load_agree_with_a_replay_through_the_changes(
    redis_url: str, redis_prefix: str, tmp_path: Path, learner: dict[str, Any]
) -> None:
    """Learns from four threads on a service of four workers while experts join and
    leave and a label is added: every worker ends with the state a replay of the log
    gives, and every learn was applied once."""
    name = "live"
    experts = ["cnn", "svm", "rf"]
    labels = ["cat", "dog", "bird"]
    with Service(tmp_path, workers=4, redis_url=redis_url, prefix=redis_prefix) as svc:
        with httpx.Client(base_url=svc.url, timeout=60) as c:
            made = c.post("/v1/models", json={"name": name, **FUSION, "learner": learner})
            assert made.status_code == 201, made.text
            voters = list(experts)
            known = list(labels)
            lock = threading.Lock()
            stop = threading.Event()
            learned, refused = [0], [0]

            def load(seed: int) -> None:
                rng = np.random.default_rng(seed)
                with httpx.Client(base_url=svc.url, timeout=60) as own:
                    while not stop.is_set():
                        with lock:
                            who, labs = list(voters), list(known)
                        y = labs[int(rng.integers(len(labs)))]
                        r = _learn(own, name, _votes(rng, who, labs), y)
                        with lock:
                            if r.status_code == 200:
                                learned[0] += 1
                            else:  # a vote of an expert retired meanwhile
                                assert r.status_code == 422 and "retired" in r.text, r.text
                                refused[0] += 1

            threads = [threading.Thread(target=load, args=(s,)) for s in range(4)]
            for t in threads:
                t.start()
            try:
                for change in (
                    ("experts", {"add": ["vit"]}),
                    ("labels", {"add": ["fox"]}),
                    ("experts", {"retire": ["svm"], "add": ["deit"]}),
                ):
                    stop.wait(1.0)
                    with httpx.Client(base_url=svc.url, timeout=60) as admin:
                        r = admin.post(f"/v1/models/{name}/{change[0]}", json=change[1])
                    assert r.status_code == 200, r.text
                    with lock:
                        voters[:] = [
                            e
                            for e in r.json()["input"]["experts"]["expert_names"]
                            if e not in r.json()["input"]["experts"].get("retired", [])
                        ]
                        known[:] = r.json()["labels"]
                # and back to a version between two bursts of learns
                stop.wait(0.5)
                back_to = c.get(f"/v1/models/{name}").json()["version"]
                stop.wait(0.5)
                with httpx.Client(base_url=svc.url, timeout=60) as admin:
                    # a rollback writes only at the log's head: under this load it may be
                    # told to come again (409), which with its key is safe
                    key = {"Idempotency-Key": f"back-{learner['kind']}"}
                    for _ in range(5):
                        r = admin.post(
                            f"/v1/models/{name}/rollback", json={"version": back_to}, headers=key
                        )
                        if r.status_code != 409:
                            break
                assert r.status_code == 200, r.text
                stop.wait(1.0)
            finally:
                stop.set()
                for t in threads:
                    t.join()
            model = wait_folded(c, name)
            states = from_each_worker(
                4,
                lambda: httpx.get(
                    f"{svc.url}/v1/models/{name}/state", headers={"Connection": "close"}
                ),
            )
        assert svc.stop() == 0

    resets = [
        seq for seq, kind in replay(redis_url, redis_prefix, name).kinds.items() if kind == "reset"
    ]
    assert len(resets) == 1 and back_to < resets[0], resets
    reset_at = resets[0]
    rep = replay(redis_url, redis_prefix, name, states_at={back_to, reset_at})
    assert sorted(k for k in rep.kinds.values() if k == "change") == ["change"] * 3
    # the rollback's state is the replay's own at that version
    assert_same_state(rep.states[reset_at]["arrays"], rep.states[back_to]["arrays"])
    assert sum(k == "learn" for k in rep.kinds.values()) == learned[0] > 100
    assert model["version"] == rep.model.version
    for worker, got in states.items():
        body = got.json()
        assert body["model_version"] >= model["version"], worker
        assert body["model_version"] == rep.model.version, worker
        assert_same_state(orjson.loads(rep.model.export()), body["state"], worker)
    assert model["counters"]["quarantined"] == 0


def test_another_host_takes_a_new_experts_vote_at_once(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """Host b holds the model, host a adds an expert: b's next request naming it is
    served, though b's copy had not read the change yet."""
    with (
        Service(tmp_path, workers=1, redis_url=redis_url, prefix=redis_prefix) as a,
        Service(tmp_path, workers=1, redis_url=redis_url, prefix=redis_prefix) as b,
        httpx.Client(base_url=a.url, timeout=60) as ca,
        httpx.Client(base_url=b.url, timeout=60) as cb,
    ):
        assert ca.post("/v1/models", json={"name": "m", **FUSION}).status_code == 201
        for host in (ca, cb):  # each holds the model
            assert _learn(host, "m", {"cnn": "cat"}, "cat").status_code == 200
        for i in range(5):
            expert, label = f"new{i}", f"label{i}"
            assert ca.post("/v1/models/m/experts", json={"add": [expert]}).status_code == 200
            learned = _learn(cb, "m", {expert: "dog"}, "dog")
            assert learned.status_code == 200, learned.text
            assert ca.post("/v1/models/m/labels", json={"add": [label]}).status_code == 200
            learned = _learn(cb, "m", {expert: label}, label)
            assert learned.status_code == 200, learned.text
        # what neither host knows is still refused
        unknown = _learn(cb, "m", {"ghost": "dog"}, "dog")
        assert unknown.status_code == 422 and "ghost" in unknown.text
        assert a.stop() == 0 and b.stop() == 0


@pytest.mark.parametrize(
    "learner",
    [
        {
            "kind": "v-combine",
            "learners": [
                {"kind": "recycling", "size": 8, "learner": {"kind": "committee", "alpha": a}}
                for a in (1.1, 2.0)
            ],
        },
        {"kind": "bagging", "n_models": 3, "learner": {"kind": "committee"}},
    ],
    ids=["v-combine", "bagging"],
)
def test_nested_learners_grow_live_as_a_replay_does(
    client: httpx.Client, model_name: str, api_settings: Any, learner: dict[str, Any]
) -> None:
    """V-Combine (its members, stored hypotheses and buffers) and an ensemble take new
    experts, a retired one and a new label in the middle of their trials, and the
    served model equals a replay of its log."""
    c, name = client, model_name
    made = c.post("/v1/models", json={"name": name, **FUSION, "learner": learner})
    assert made.status_code == 201, made.text
    rng = np.random.default_rng(11)
    experts, labels = ["cnn", "svm", "rf"], ["cat", "dog", "bird"]
    for change in (
        None,
        ("experts", {"add": ["vit"]}),
        ("labels", {"add": ["fox"]}),
        ("experts", {"retire": ["svm"]}),
    ):
        if change is not None:
            r = c.post(f"/v1/models/{name}/{change[0]}", json=change[1])
            assert r.status_code == 200, r.text
            body = r.json()
            labels = body["labels"]
            retired = body["input"]["experts"].get("retired", [])
            experts = [e for e in body["input"]["experts"]["expert_names"] if e not in retired]
        for _ in range(30):
            y = labels[int(rng.integers(len(labels)))]
            assert _learn(c, name, _votes(rng, experts, labels), y).status_code == 200
    served = c.get(f"/v1/models/{name}/state").json()
    rep = replay(api_settings.redis_url, api_settings.key_prefix, name)
    assert served["model_version"] == rep.model.version == 123
    assert_same_state(orjson.loads(rep.model.export()), served["state"])
