"""Several normalisations per classifier and subsets' averages, served: named weights,
a budget that names itself, growth and retirement live, and a replay that is the model."""

from __future__ import annotations

import math
import time
from typing import Any

import httpx
import numpy as np
import orjson
from _procs import assert_same_state, replay

NAMES = ["cnn", "svm", "knn"]
LABELS = ["cat", "dog", "bird"]
POOL = {
    "expert_names": NAMES,
    "normalize": ["sum-to-one", "rank"],
    "combinations": {"size": 3, "by": ["score", "rank"]},
}


def _votes(rng: np.random.Generator, names: list[str]) -> dict[str, Any]:
    return {e: rng.dirichlet(np.ones(3)).round(4).tolist() for e in names if rng.random() < 0.9}


def _settled(c: httpx.Client, name: str) -> dict[str, float]:
    """The sub-experts' weights once every trial is folded and the summary caught up."""
    deadline = time.monotonic() + 30
    while True:
        s = c.get(f"/v1/models/{name}/stats").json()
        if s["folded"] == s["version"] == s["summary_version"]:
            weights: dict[str, float] = s["experts"]
            return weights
        assert time.monotonic() < deadline, f"stats of {name} did not settle: {s}"
        time.sleep(0.1)


def _learn(c: httpx.Client, name: str, votes: dict[str, Any], label: str) -> dict[str, Any]:
    r = c.post(f"/v1/models/{name}/learn", json={"instance": {"experts": votes}, "label": label})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_a_pool_of_sub_experts_learns_grows_and_replays(
    client: httpx.Client, model_name: str, api_settings: Any
) -> None:
    c, name = client, model_name
    made = c.post(
        "/v1/models",
        json={
            "name": name,
            "labels": LABELS,
            "input": {"experts": POOL},
            "learner": {"kind": "weighted-majority", "beta": 0.5},
        },
    )
    assert made.status_code == 201, made.text
    assert made.json()["input"]["experts"]["combinations"] == POOL["combinations"]
    rng = np.random.default_rng(11)
    for _ in range(40):  # knn is always right: its sub-experts keep their weight
        votes = _votes(rng, NAMES)
        label = LABELS[int(rng.integers(3))]
        votes["knn"] = [0.9 if lab == label else 0.05 for lab in LABELS]
        _learn(c, name, votes, label)
    weights = _settled(c, name)
    singles = [f"expert:{e}/{n}" for e in NAMES for n in ("sum-to-one", "rank")]
    subsets = ["cnn+svm", "cnn+knn", "svm+knn", "cnn+svm+knn"]
    derived = [f"expert:{s}/{by}" for s in subsets for by in ("score", "rank")]
    assert list(weights) == singles + derived
    assert weights["expert:knn/sum-to-one"] == max(weights.values())

    changed = c.post(f"/v1/models/{name}/experts", json={"add": ["vit"], "retire": ["svm"]})
    assert changed.status_code == 200, changed.text
    refused = c.post(
        f"/v1/models/{name}/learn",
        json={"instance": {"experts": {"svm": [1, 0, 0]}}, "label": "cat"},
    )
    assert refused.status_code == 422 and "retired" in refused.text
    for _ in range(40):
        _learn(c, name, _votes(rng, ["cnn", "knn", "vit"]), LABELS[int(rng.integers(3))])
    after = _settled(c, name)
    assert "expert:vit/rank" in after and "expert:svm+knn+vit/score" in after
    # svm and every subset with it vote no more, so each keeps the weight it had
    silent = [e for e in weights if "svm" in e]
    assert len(silent) == 8 and all(after[e] == weights[e] for e in silent)
    assert any(after[e] != weights[e] for e in weights if "svm" not in e)
    assert changed.json()["version"] == 41

    state = c.get(f"/v1/models/{name}/state").json()
    rep = replay(api_settings.redis_url, api_settings.key_prefix, name)
    assert_same_state(orjson.loads(rep.model.export()), state["state"])


def test_too_many_derived_experts_is_a_422_naming_the_budget(
    client: httpx.Client, model_name: str
) -> None:
    c, name = client, model_name
    names = [f"e{i}" for i in range(30)]
    asked = math.comb(30, 2) + math.comb(30, 3)  # 4,495: over the default 4,096
    body = {
        "name": name,
        "labels": LABELS,
        "input": {"experts": {"expert_names": names, "combinations": {"size": 3}}},
        "learner": {"kind": "weighted-majority"},
    }
    r = c.post("/v1/models", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "input", "experts", "combinations"]
    assert "max_derived_experts" in r.text
    assert str(asked) in r.text
    assert c.get(f"/v1/models/{name}").status_code == 404

    body["input"]["experts"]["expert_names"] = names[:29]  # 4,060: within it
    assert c.post("/v1/models", json=body).status_code == 201
    grown = c.post(f"/v1/models/{name}/experts", json={"add": ["e29"]})
    assert grown.status_code == 422, grown.text
    assert "max_derived_experts" in grown.text
    assert c.get(f"/v1/models/{name}").json()["version"] == 0  # nothing was logged
