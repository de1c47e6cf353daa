"""Rollbacks: the learner reset to its state at an earlier version, by an entry in the
log, itself reversible; what the model gained since stays."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import orjson
from _procs import assert_same_state, replay, wait_folded

from app.core.settings import Settings
from models.core.learner import CONTEXT_PARAMS
from models.registry import build

FUSION = {
    "labels": ["cat", "dog", "bird"],
    "input": {"experts": {"expert_names": ["cnn", "svm", "rf"], "threshold_experts": True}},
    "learner": {"kind": "committee", "alpha": 1.3},
}


def _learn(c: httpx.Client, name: str, seed: int, n: int, experts: list[str]) -> None:
    rng = np.random.default_rng(seed)
    labels = ["cat", "dog", "bird"]
    items = [
        {
            "instance": {"experts": {e: labels[int(rng.integers(3))] for e in experts}},
            "label": labels[int(rng.integers(3))],
        }
        for _ in range(n)
    ]
    r = c.post(f"/v1/models/{name}/learn/batch", json={"items": items})
    assert r.status_code == 200 and all("result" in i for i in r.json()["items"]), r.text


def _state(c: httpx.Client, name: str) -> dict[str, Any]:
    got: dict[str, Any] = c.get(f"/v1/models/{name}/state").json()["state"]
    return got


def test_a_rollback_resets_the_state_and_can_itself_be_rolled_back(
    client: httpx.Client, model_name: str, api_settings: Settings
) -> None:
    c, name = client, model_name
    assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
    _learn(c, name, 1, 20, ["cnn", "svm", "rf"])
    pending = c.post(
        f"/v1/models/{name}/predict", json={"instance": {"experts": {"cnn": "dog"}}}
    ).json()["trial_id"]  # made at version 20, labelled after the rollback
    _learn(c, name, 2, 20, ["cnn", "svm", "rf"])
    before = _state(c, name)  # at 40
    rep = replay(api_settings.redis_url, api_settings.key_prefix, name, states_at={12})

    r = c.post(f"/v1/models/{name}/rollback", json={"version": 12})
    assert r.status_code == 200, r.text
    assert r.json()["version"] == 41
    assert_same_state(_state(c, name), rep.states[12])
    stats = c.get(f"/v1/models/{name}/stats").json()
    assert stats["changes"][-1] == {"version": 41, "what": "rolled back to 12"}
    # the prediction served before it takes its label, against the state rolled back to
    labelled = c.post(f"/v1/models/{name}/label", json={"trial_id": pending, "label": "cat"})
    assert labelled.status_code == 200, labelled.text
    assert c.get(f"/v1/models/{name}").json()["version"] == 42

    # the versions before the rollback stay restorable: undo it
    versions = c.get(f"/v1/models/{name}/versions").json()
    assert versions["restorable"] == [{"from": 0, "to": 42}], versions
    back = c.post(f"/v1/models/{name}/rollback", json={"version": 40})
    assert back.status_code == 200, back.text
    assert_same_state(_state(c, name), before)
    # and a rollback to a version after the first rollback
    after = c.post(f"/v1/models/{name}/rollback", json={"version": 42})
    assert after.status_code == 200, after.text


def test_a_rollback_keeps_what_the_model_gained_since(
    client: httpx.Client, model_name: str, api_settings: Settings
) -> None:
    c, name = client, model_name
    assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
    _learn(c, name, 3, 15, ["cnn", "svm", "rf"])
    rep = replay(api_settings.redis_url, api_settings.key_prefix, name, states_at={10})
    assert c.post(f"/v1/models/{name}/experts", json={"add": ["vit"]}).status_code == 200
    assert c.post(f"/v1/models/{name}/labels", json={"add": ["fox"]}).status_code == 200
    _learn(c, name, 4, 15, ["cnn", "vit"])

    r = c.post(f"/v1/models/{name}/rollback", json={"version": 10})
    assert r.status_code == 200, r.text
    model = r.json()
    assert model["labels"] == ["cat", "dog", "bird", "fox"]
    assert model["input"]["experts"]["expert_names"] == ["cnn", "svm", "rf", "vit"]
    # the state at 10, grown by the two changes as a learner grows: an expert (one
    # sub-expert more), then a label (its threshold sub-expert)
    at10 = rep.states[10]
    spec = {k: v for k, v in at10["params"].items() if k not in CONTEXT_PARAMS}
    old = build(spec, labels=FUSION["labels"], size=at10["params"]["n_experts"])
    old.import_state(at10)
    n = old.input_size
    grown = old.grown(n + 1, np.arange(n)).grown(n + 2, np.arange(n + 1), model["labels"])
    assert_same_state(_state(c, name), orjson.loads(orjson.dumps(grown.export_state())))
    # the new expert and label are still the model's
    _learn(c, name, 5, 5, ["vit"])
    learned = c.post(
        f"/v1/models/{name}/learn", json={"instance": {"experts": {"vit": "fox"}}, "label": "fox"}
    )
    assert learned.status_code == 200, learned.text


def test_a_trial_learned_just_after_a_rollback_is_folded_without_another_call(
    client: httpx.Client, model_name: str
) -> None:
    # the outcomes of the learns before the rollback are being folded in the background
    # when the rollback replaces the worker's copy; the learn after it, on the new copy,
    # finds that fold under way, which must then fold the new copy's outcome too
    c, name = client, model_name
    assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
    _learn(c, name, 6, 8, ["cnn", "svm", "rf"])
    assert c.post(f"/v1/models/{name}/rollback", json={"version": 4}).status_code == 200
    _learn(c, name, 7, 1, ["cnn", "svm", "rf"])
    model = wait_folded(c, name, timeout=10.0)
    assert (model["version"], model["counters"]["learned"]) == (10, 9)


def test_what_a_rollback_cannot_do_is_named(client: httpx.Client, model_name: str) -> None:
    c, name = client, model_name
    assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
    _learn(c, name, 6, 5, ["cnn"])
    for body in ({"version": 6}, {"version": -1}, {"version": "1"}, {}):
        r = c.post(f"/v1/models/{name}/rollback", json=body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["detail"][0]["loc"][-1] == "version", r.text
    assert c.post("/v1/models/nope/rollback", json={"version": 0}).status_code == 404
    headers = {"Idempotency-Key": f"back-{name}"}
    first = c.post(f"/v1/models/{name}/rollback", json={"version": 2}, headers=headers)
    again = c.post(f"/v1/models/{name}/rollback", json={"version": 2}, headers=headers)
    assert first.status_code == again.status_code == 200, again.text
    assert again.json()["version"] == first.json()["version"] == 6
    other = c.post(f"/v1/models/{name}/rollback", json={"version": 3}, headers=headers)
    assert other.status_code == 409
