"""``committee serve`` with its private Redis, stopped and started again on the same data.

The private Redis keeps an append-only file in the data directory: a model, its learner
state, its counters and its pending predictions survive a restart of the whole service.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import numpy as np
from _procs import Service, learn_some, majority_model, majority_payloads, wait_folded
from _workers import from_each_worker


def redis_pid(data_dir: Path) -> int:
    return int((data_dir / "redis.pid").read_text())


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def test_a_restarted_service_has_its_models_as_they_were(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    name = "majority"
    data = iter(majority_payloads(200, np.random.default_rng(9)))
    with (
        Service(tmp_path, workers=2, data_dir=data_dir) as svc,
        httpx.Client(base_url=svc.url, timeout=60) as c,
    ):
        first_redis = redis_pid(data_dir)
        assert c.post("/v1/models", json=majority_model(name)).status_code == 201
        learn_some(c, name, data, 40)
        pending = []
        for _ in range(3):
            x, y = next(data)
            p = c.post(f"/v1/models/{name}/predict", json={"instance": x})
            assert p.status_code == 200, p.text
            pending.append((p.json(), y))
        state = c.get(f"/v1/models/{name}/state").json()
        model = wait_folded(c, name)
        assert state["model_version"] == model["version"] == 40
        assert svc.stop() == 0  # SIGTERM: a clean stop, the private Redis with it
    assert not alive(first_redis)
    assert not (data_dir / "redis.pid").exists()
    assert list(data_dir.glob("appendonlydir/*.aof")) or list(data_dir.glob("*.aof"))

    with (
        Service(tmp_path, workers=2, data_dir=data_dir) as svc,
        httpx.Client(base_url=svc.url, timeout=60) as c,
    ):
        assert redis_pid(data_dir) != first_redis and alive(redis_pid(data_dir))
        assert c.get(f"/v1/models/{name}").json() == model
        assert [m["name"] for m in c.get("/v1/models").json()["models"]] == [name]
        # each worker loads the model from the log: the same state, to the bit
        answers = from_each_worker(
            svc.workers,
            lambda: c.get(f"/v1/models/{name}/state", headers={"Connection": "close"}),
        )
        for again in answers.values():
            assert again.status_code == 200, again.text
            assert again.json() == state
        # predictions made before the restart still take their labels, once
        for p, y in pending:
            body = {"trial_id": p["trial_id"], "label": y}
            got = c.post(f"/v1/models/{name}/label", json=body)
            assert got.status_code == 200, got.text
            assert got.json()["predicted"] == p["label"]
            assert c.post(f"/v1/models/{name}/label", json=body).json() == got.json()
        learn_some(c, name, data, 10)
        after = wait_folded(c, name)
        assert after["version"] == 53
        assert after["counters"]["labelled"] == 3
        assert after["counters"]["learned"] == 50
        assert after["counters"]["predictions"] == 3
        grown = c.get(f"/v1/models/{name}/state").json()
        assert grown["model_version"] == 53 and grown["state"] != state["state"]
        assert svc.stop() == 0
    assert not os.path.exists(data_dir / "redis.pid")
