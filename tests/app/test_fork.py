"""Forks: a model made from another's state at a version, or another learner trained on
its log up to there; and the versions a model can be rebuilt at."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
from _procs import assert_same_state, replay
from redis import Redis

from app.core.settings import Settings
from models.inputs.space import InputSpace
from models.registry import build
from storage.codec import decode_entry
from storage.keys import Keys

FUSION = {
    "labels": ["cat", "dog", "bird"],
    "input": {"experts": {"expert_names": ["cnn", "svm", "rf"], "threshold_experts": True}},
    "learner": {"kind": "committee", "alpha": 1.3},
    "label_ttl": 600.0,
}


@pytest.fixture(scope="module")
def snappy(api_settings: Settings, server_thread: Any) -> Iterator[tuple[str, Settings]]:
    """A service that snapshots every 16 trials and keeps 8 entries beyond them."""
    settings = api_settings.model_copy(
        update={"snapshot_every": 16, "log_retain": 8, "key_prefix": api_settings.key_prefix + "-s"}
    )
    with server_thread(settings) as server:
        yield server.url, settings


def _learn(
    c: httpx.Client, name: str, rng: np.random.Generator, n: int, experts: list[str]
) -> None:
    labels = c.get(f"/v1/models/{name}").json()["labels"]
    items = [
        {
            "instance": {"experts": {e: labels[int(rng.integers(len(labels)))] for e in experts}},
            "label": labels[int(rng.integers(len(labels)))],
        }
        for _ in range(n)
    ]
    r = c.post(f"/v1/models/{name}/learn/batch", json={"items": items})
    assert r.status_code == 200 and all("result" in i for i in r.json()["items"]), r.text


def _history(c: httpx.Client, name: str) -> None:
    """30 learns, an expert and a label added, 20 learns: 52 entries."""
    rng = np.random.default_rng(11)
    assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
    _learn(c, name, rng, 30, ["cnn", "svm", "rf"])
    assert c.post(f"/v1/models/{name}/experts", json={"add": ["vit"]}).status_code == 200
    assert c.post(f"/v1/models/{name}/labels", json={"add": ["fox"]}).status_code == 200
    _learn(c, name, rng, 20, ["cnn", "svm", "rf", "vit"])


def test_a_fork_starts_from_the_state_at_its_version(
    client: httpx.Client, model_name: str, api_settings: Settings
) -> None:
    c, name = client, model_name
    _history(c, name)
    versions = c.get(f"/v1/models/{name}/versions").json()
    assert versions["restorable"] == [{"from": 0, "to": 52}] and versions["snapshot"] is None
    assert [m["version"] for m in versions["changes"]] == [31, 32]

    rep = replay(api_settings.redis_url, api_settings.key_prefix, name, states_at={20, 40})
    for at in (20, 40):
        fork = f"{name}-at-{at}"
        r = c.post("/v1/models", json={"name": fork, "from": {"model": name, "version": at}})
        assert r.status_code == 201, r.text
        made = r.json()
        assert made["version"] == 1  # its first entry holds the state
        state = c.get(f"/v1/models/{fork}/state").json()["state"]
        assert_same_state(state, rep.states[at], fork)
        # the input as it was then: the expert and the label came at 31 and 32
        assert ("vit" in made["input"]["experts"]["expert_names"]) == (at > 31)
        assert ("fox" in made["labels"]) == (at > 32)
        assert made["learner"] == FUSION["learner"] and made["label_ttl"] == 600.0
    # the fork lives on its own
    _learn(c, f"{name}-at-40", np.random.default_rng(1), 5, ["vit"])
    assert c.get(f"/v1/models/{name}").json()["version"] == 52
    # now, by default
    r = c.post("/v1/models", json={"name": f"{name}-now", "from": {"model": name}})
    assert r.status_code == 201, r.text
    now = c.get(f"/v1/models/{name}/state").json()["state"]
    assert_same_state(c.get(f"/v1/models/{name}-now/state").json()["state"], now)


def test_a_fork_with_another_learner_is_trained_on_the_log(
    client: httpx.Client, model_name: str, api_settings: Settings
) -> None:
    c, name = client, model_name
    _history(c, name)
    learner = {"kind": "weighted-majority", "beta": 0.7}
    body = {"name": f"{name}-wm", "from": {"model": name, "version": 45}, "learner": learner}
    r = c.post("/v1/models", json=body)
    assert r.status_code == 201, r.text
    assert r.json()["learner"] == learner
    got = c.get(f"/v1/models/{name}-wm/state").json()["state"]

    # the same learner, built here and taught the log's trials up to 45, growing at the
    # changes as the service's learners do
    keys = Keys(api_settings.key_prefix, name)
    with Redis.from_url(api_settings.redis_url) as r:
        entries = r.xrange(keys.log, "-", "45-0")
    space = InputSpace.from_config({"labels": FUSION["labels"], **FUSION["input"]})
    wm = build(learner, labels=space.labels, size=space.size("experts"))
    for entry_id, fields in entries:
        flat = [v for kv in fields.items() for v in kv]
        e = decode_entry(entry_id, flat, space.size("experts"), space.n_classes)
        if e.kind == "change":
            space = space.changed(orjson.loads(e.change))
            wm = wm.grown(space.size("experts"), np.arange(wm.input_size), space.labels)
            continue
        wm.learn(e.x, space.labels[e.y])
    assert_same_state(got, orjson.loads(orjson.dumps(wm.export_state())))


def test_what_a_fork_cannot_do_is_named(client: httpx.Client, model_name: str) -> None:
    c, name = client, model_name
    _history(c, name)
    cases = [
        ({"from": {"model": "no-such-model"}}, 404, ""),
        ({"from": {"model": name, "version": 53}}, 422, "from.version"),
        ({"from": {"model": name}, "labels": ["a", "b"]}, 422, "labels"),
        ({"from": {"model": name}, "learner": {"kind": "nope"}}, 422, "learner.kind"),
        ({"from": {"model": name, "version": -1}}, 422, "version"),
    ]
    for extra, status, field in cases:
        r = c.post("/v1/models", json={"name": f"{name}-x", **extra})
        assert r.status_code == status, (extra, r.text)
        if status == 422:  # the field's path ends the error's location
            loc = ".".join(map(str, r.json()["detail"][0]["loc"]))
            assert loc.endswith(field), (extra, r.text)
    assert c.get(f"/v1/models/{name}-x").status_code == 404  # nothing was made
    # a keyed retry makes the fork once
    body = {"name": f"{name}-k", "from": {"model": name, "version": 10}}
    headers = {"Idempotency-Key": f"fork-{name}"}
    first = c.post("/v1/models", json=body, headers=headers)
    again = c.post("/v1/models", json=body, headers=headers)
    assert first.status_code == 201 and again.status_code == 201, again.text
    assert c.get(f"/v1/models/{name}-k").json()["version"] == 1


def test_a_fork_from_a_snapshot_and_its_trimmed_log(
    snappy: tuple[str, Settings], model_name: str
) -> None:
    url, settings = snappy
    name = model_name
    with httpx.Client(base_url=url, timeout=30) as c:
        _history(c, name)
        rng = np.random.default_rng(5)
        for _ in range(4):  # a snapshot every 16 trials: the log is trimmed behind them
            _learn(c, name, rng, 10, ["cnn", "vit"])
        versions = c.get(f"/v1/models/{name}/versions").json()
        snap = versions["snapshot"]
        assert snap is not None and versions["log"]["first"] > 1
        assert versions["restorable"] == [{"from": snap, "to": 92}]
        old = {"name": f"{name}-old", "from": {"model": name, "version": 1}}
        r = c.post("/v1/models", json=old)
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "from", "version"]
        # at the snapshot: its state as Redis keeps it
        keys = Keys(settings.key_prefix, name)
        with Redis.from_url(settings.redis_url) as redis:
            kept = redis.hmget(keys.snapshot, "version", "state")
        assert int(kept[0]) == snap
        r = c.post(
            "/v1/models", json={"name": f"{name}-s", "from": {"model": name, "version": snap}}
        )
        assert r.status_code == 201, r.text
        assert r.json()["input"]["experts"]["expert_names"] == ["cnn", "svm", "rf", "vit"]
        got = c.get(f"/v1/models/{name}-s/state").json()["state"]
        kept_state = orjson.loads(kept[1])  # the learner's, beside the monitors'
        assert_same_state(got, kept_state["learner"])
        # now: the state the serving workers reached by replaying the log as it came
        now = c.get(f"/v1/models/{name}/state").json()
        r = c.post("/v1/models", json={"name": f"{name}-n", "from": {"model": name}})
        assert r.status_code == 201, r.text
        assert_same_state(c.get(f"/v1/models/{name}-n/state").json()["state"], now["state"])
