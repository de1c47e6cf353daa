"""The fusion preset served: its Brier term listed with its bound, a value past the bound a
422 naming ``learner.brier``, and a fusion model whose log replays to its state exactly."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import orjson
import pytest
from _procs import assert_same_state, replay

from models.learners.fusion import FUSION_INPUT
from models.learners.weighted_majority import BRIER_LIMIT

NAMES = ["cnn", "svm", "knn", "vit"]
LABELS = ["cat", "dog", "bird"]


def _model(name: str, learner: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "labels": LABELS,
        "input": {"experts": {**FUSION_INPUT, "expert_names": NAMES}},
        "learner": learner,
    }


def test_the_brier_term_is_listed_with_its_bound(client: httpx.Client) -> None:
    kinds = {k["kind"]: k for k in client.get("/v1/learners").json()}
    for kind, default in [("weighted-majority", 0.0), ("fusion", 1.0)]:
        brier = {p["name"]: p for p in kinds[kind]["parameters"]}["brier"]
        assert brier["default"] == default
        assert brier["expected"] == f"a finite number >= 0 and <= {BRIER_LIMIT:g}"


@pytest.mark.parametrize("value", [-1, BRIER_LIMIT + 1, "1"])
def test_a_brier_past_its_bound_is_a_422_naming_it(
    client: httpx.Client, model_name: str, value: Any
) -> None:
    r = client.post("/v1/models", json=_model(model_name, {"kind": "fusion", "brier": value}))
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "learner", "brier"]
    assert f"<= {BRIER_LIMIT:g}" in detail["msg"]
    assert client.get(f"/v1/models/{model_name}").status_code == 404


def test_a_fusion_model_replays_to_its_state(
    client: httpx.Client, model_name: str, api_settings: Any
) -> None:
    made = client.post("/v1/models", json=_model(model_name, {"kind": "fusion"}))
    assert made.status_code == 201, made.text
    rng = np.random.default_rng(3)
    for _ in range(60):
        label = int(rng.integers(3))
        votes = {e: rng.dirichlet(np.ones(3)).round(4).tolist() for e in NAMES}
        votes["knn"] = [0.8 if c == label else 0.1 for c in range(3)]  # knn is right
        body = {"instance": {"experts": votes}, "label": LABELS[label]}
        r = client.post(f"/v1/models/{model_name}/learn", json=body)
        assert r.status_code == 200, r.text
    state = client.get(f"/v1/models/{model_name}/state").json()["state"]
    assert state["params"]["brier"] == 1.0
    rep = replay(api_settings.redis_url, api_settings.key_prefix, model_name)
    assert_same_state(orjson.loads(rep.model.export()), state)
