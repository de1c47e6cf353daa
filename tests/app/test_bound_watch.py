"""The bound watch over HTTP, on the real app and a real Redis: its figures beside the
drift watch's, what a count of the stream gives; no alert on a real stream; and a learner
given weights from outside the log (a state import) that falls behind the bound raises one
alert, the same on every worker, marked once on the curve."""

from __future__ import annotations

import base64
import math
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
from _procs import Service
from _workers import json_from_each_worker

LABELS = ["a", "b"]


def _model(name: str, learner: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "labels": LABELS,
        "input": {"experts": {"expert_names": ["x", "y", "z"]}},
        "learner": learner,
    }


def _stream(rng: np.random.Generator, n: int, right: tuple[float, ...]) -> list[dict[str, Any]]:
    """``n`` trials; expert i votes the label with probability ``right[i]``."""
    out = []
    for _ in range(n):
        y = int(rng.integers(2))
        votes = {
            e: LABELS[y if rng.random() < p else 1 - y] for e, p in zip("xyz", right, strict=True)
        }
        out.append({"instance": {"experts": votes}, "label": LABELS[y]})
    return out


def _learn(c: httpx.Client, name: str, items: list[dict[str, Any]]) -> None:
    got = c.post(f"/v1/models/{name}/learn/batch", json={"items": items})
    assert got.status_code == 200, got.text


def test_the_figures_beside_the_drift_watchs_and_no_alert_on_a_real_stream(
    client: httpx.Client, model_name: str
) -> None:
    c, name = client, model_name
    learner = {"kind": "weighted-majority", "beta": 0.5, "weight_floor": 0.05}
    assert c.post("/v1/models", json=_model(name, learner)).status_code == 201
    items = _stream(np.random.default_rng(1), 600, (0.8, 0.6, 0.5))
    for at in range(0, 600, 100):
        _learn(c, name, items[at : at + 100])
    got = c.get(f"/v1/models/{name}/alerts").json()
    bound = got["bound"]
    assert bound["learner"] == {
        "kind": "weighted-majority",
        "beta": 0.5,
        "update": "every_trial",
        "weight_floor": 0.05,
        "fixed_share": 0.0,
        "brier": 0.0,
    }
    stats = c.get(f"/v1/models/{name}/stats").json()
    assert bound["since"] == 1 and bound["trials"] == 600
    assert bound["mistakes"] == stats["mistakes"]  # learned trials: served is its own
    wrong = {e: sum(i["instance"]["experts"][e] != i["label"] for i in items) for e in "xyz"}
    best = min(wrong, key=wrong.__getitem__)
    assert bound["best"] == {"expert": f"expert:{best}", "mistakes": wrong[best]} | {
        "loss": float(wrong[best])
    }
    divisor = -math.log(1 - 0.5 * 0.45)
    assert bound["bound"] == pytest.approx((math.log(3) + wrong[best] * math.log(2)) / divisor)
    assert bound["mistakes"] <= bound["bound"] and bound["suspended"] is None
    assert bound["alerts"] == [] and not bound["over"]
    # a learner without a proven bound (a floor and a share together) has no watch
    other = f"{name}-fs"
    spec = {"kind": "weighted-majority", "weight_floor": 0.1, "fixed_share": 0.1}
    assert c.post("/v1/models", json=_model(other, spec)).status_code == 201
    assert c.get(f"/v1/models/{other}/alerts").json()["bound"] is None


def _weights(state: dict[str, Any], u: list[float]) -> dict[str, Any]:
    """``state`` with Weighted Majority's weights ``u`` (its sums recounted)."""
    arrays = state["arrays"]

    def encoded(a: np.ndarray) -> dict[str, Any]:
        return {"dtype": "float64", "shape": list(a.shape), "data": base64.b64encode(a).decode()}

    w = np.array(u)
    arrays["u_"] = encoded(w)
    arrays["scalars_"] = encoded(np.array([w.sum(), w.sum(), 1.0]))
    return state


def test_a_learner_behind_its_bound_raises_one_alert_across_workers(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    name = "behind"
    rng = np.random.default_rng(2)
    with Service(tmp_path, workers=2, redis_url=redis_url, prefix=redis_prefix) as svc:
        with httpx.Client(base_url=svc.url, timeout=30) as c:
            spec = {"kind": "weighted-majority", "beta": 0.5}
            assert c.post("/v1/models", json=_model(name, spec)).status_code == 201
            # x always right, y and z always wrong: at most ln 3 / ln(4/3) = 3.8 mistakes
            _learn(c, name, _stream(rng, 30, (1.0, 0.0, 0.0)))
            before = c.get(f"/v1/models/{name}/alerts").json()["bound"]
            assert before["mistakes"] <= 3 and before["alerts"] == []
            # weights from outside the log: x nearly out; the run goes on through the import
            state = c.get(f"/v1/models/{name}/state").json()["state"]
            got = c.put(f"/v1/models/{name}/state", json={"state": _weights(state, [1e-150, 1, 1])})
            assert got.status_code == 200, got.text
            _learn(c, name, _stream(rng, 60, (1.0, 0.0, 0.0)))
        path = f"/v1/models/{name}/alerts"
        answers = json_from_each_worker(svc.url, path, 2)
        first = next(iter(answers.values()))
        assert all(a["bound"] == first["bound"] for a in answers.values())
        bound = first["bound"]
        [alert] = bound["alerts"]  # once: it stays over the bound, x's weight far behind
        assert alert["kind"] == "bound" and alert["best"] == "expert:x"
        assert alert["bound"] == pytest.approx(math.log(3) / math.log(4 / 3))
        assert alert["best_mistakes"] == 0 and alert["mistakes"] == 4
        assert alert["seq"] >= 31 and bound["over"]
        assert bound["mistakes"] == before["mistakes"] + 60
        # raised once whichever worker saw it first: one mark on the curve

        def marks() -> list[dict[str, Any]]:
            with httpx.Client(base_url=svc.url, timeout=30) as c:
                changes = c.get(f"/v1/models/{name}/stats").json()["changes"]
            return [ch for ch in changes if ch["what"].startswith("bound:")]

        deadline = time.monotonic() + 30
        while not marks():
            assert time.monotonic() < deadline, "no mark of the bound alert"
            time.sleep(0.1)
        time.sleep(1.0)  # both workers have looked over their watches since
        assert [m["version"] for m in marks()] == [alert["seq"]]
        # pushed as an event too: a stream from the log's start gives it before progress
        pushed, kind = [], ""
        with (
            httpx.Client(base_url=svc.url, timeout=30) as c,
            c.stream("GET", f"/v1/models/{name}/events", params={"from": 0}) as r,
        ):
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("event: "):
                    kind = line.removeprefix("event: ")
                elif line.startswith("data: ") and kind == "alert":
                    pushed.append(orjson.loads(line.removeprefix("data: ")))
                elif kind == "progress":
                    break
        assert [a for a in pushed if a["kind"] == "bound"] == [{"version": alert["seq"], **alert}]
        assert svc.stop() == 0
