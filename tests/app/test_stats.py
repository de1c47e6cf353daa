"""Statistics for dashboards, over HTTP."""

from __future__ import annotations

import itertools
import time
from typing import Any

import httpx
import numpy as np
import pytest

from models.inputs.datasets import MajorityProblem

PROBLEM = MajorityProblem(n=20, r=10, k=5, noise=0.05)
NAMES = [f"clf{i}" for i in range(PROBLEM.n_experts)]


def majority_items(n: int, seed: int) -> list[dict[str, Any]]:
    xs, ys, _ = PROBLEM.sample(n, np.random.default_rng(seed))
    out = []
    for x, y in zip(xs, ys, strict=True):
        dense = x.dense(PROBLEM.n_experts, PROBLEM.k)
        votes = {NAMES[e]: int(np.argmax(dense[e])) for e in np.flatnonzero(dense.any(axis=1))}
        out.append({"instance": {"experts": votes}, "label": int(y)})
    return out


def learn_batch(client: httpx.Client, name: str, n: int, seed: int) -> list[dict[str, Any]]:
    """Learn ``n`` trials of the majority problem in one batch; their items' answers."""
    batch = {"items": majority_items(n, seed)}
    got = client.post(f"/v1/models/{name}/learn/batch", json=batch).json()
    return list(got["items"])


def create(client: httpx.Client, name: str, learner: dict[str, Any]) -> None:
    body = {
        "name": name,
        "labels": list(range(PROBLEM.k)),
        "input": {"experts": {"expert_names": NAMES}},
        "learner": learner,
    }
    assert client.post("/v1/models", json=body).status_code == 201


def settled(client: httpx.Client, name: str) -> dict[str, Any]:
    """Stats once every trial is folded and the summary has caught up."""
    deadline = time.monotonic() + 15
    while True:
        s = client.get(f"/v1/models/{name}/stats").json()
        if s["folded"] == s["version"] == s["summary_version"]:
            return dict(s)
        if time.monotonic() > deadline:
            pytest.fail(f"stats of {name} did not settle in 15 s: {s}")
        time.sleep(0.1)


def test_fusion_stats(client: httpx.Client, model_name: str) -> None:
    create(client, model_name, {"kind": "committee", "alpha": 1.3})
    results = []
    for seed in range(3):
        results += [i["result"] for i in learn_batch(client, model_name, 400, seed)]
    for _ in range(3):
        item = majority_items(1, 9)[0]
        client.post(f"/v1/models/{model_name}/predict", json={"instance": item["instance"]})
    s = settled(client, model_name)
    mistakes = sum(r["mistake"] for r in results)
    assert (s["version"], s["learned"], s["pending"], s["predictions"]) == (1200, 1200, 3, 3)
    assert s["mistakes"] == mistakes and s["error_rate"] == mistakes / 1200
    assert sum(n for row in s["confusion"].values() for n in row.values()) == 1200
    assert sum(s["confusion"][str(k)].get(str(k), 0) for k in range(5)) == 1200 - mistakes
    curve = s["curve"]
    assert curve[-1] == [1200, mistakes] and len(curve) == 300  # thinned past 512 points
    assert [t for t, _ in curve] == list(range(4, 1201, 4))
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(curve))
    expect = sum(r["mistake"] for r in results[-1000:])
    assert s["window"] == {"trials": 1000, "mistakes": expect, "error_rate": expect / 1000}
    weights = s["experts"]
    assert set(weights) == {f"expert:{n}" for n in NAMES}
    assert abs(sum(weights.values()) - 1) < 1e-9  # Committee's weights are normalised
    relevant = sorted(weights, key=weights.get)[-10:]  # the majority's 10 experts lead
    assert len(set(relevant)) == 10 and s["learners"] is None and s["internal"] is None


def test_the_error_rate_counts_judged_trials_only(client: httpx.Client, model_name: str) -> None:
    create(client, model_name, {"kind": "committee", "alpha": 1.3})
    results = [i["result"] for i in learn_batch(client, model_name, 30, 0)]
    change = client.post(f"/v1/models/{model_name}/experts", json={"add": ["late"]})
    assert change.status_code == 200, change.text
    results += [i["result"] for i in learn_batch(client, model_name, 30, 1)]
    s = settled(client, model_name)
    mistakes = sum(r["mistake"] for r in results)
    assert s["folded"] == 61 and s["mistakes"] == mistakes  # the change is an entry
    assert s["error_rate"] == mistakes / 60


def test_recycling_and_voting_stats(client: httpx.Client, model_name: str) -> None:
    members = [
        {"kind": "recycling", "size": 20, "learner": {"kind": "committee", "alpha": a}}
        for a in (1.05, 2.0)
    ]
    create(client, model_name, {"kind": "v-combine", "learners": members})
    create(client, model_name + "r", members[0])
    for name in (model_name, model_name + "r"):
        learn_batch(client, name, 300, 1)
    s = settled(client, model_name)
    assert [m["name"] for m in s["learners"]] == [
        "recycling(size=20) / committee(alpha=1.05)",
        "recycling(size=20) / committee(alpha=2.0)",
    ]
    best = min(s["learners"], key=lambda m: m["recent_mistakes"])
    assert s["leader"] == best["name"]
    assert all(0 < m["mistakes"] < 300 for m in s["learners"])
    r = settled(client, model_name + "r")
    assert r["internal"]["trials"] > 0 and r["internal"]["mistakes"] <= r["internal"]["trials"]
    state = client.get(f"/v1/models/{model_name}r/state").json()["state"]
    assert r["internal"]["trials"] == int(
        np.frombuffer(__import__("base64").b64decode(state["arrays"]["internal_"]["data"]), "<i8")[
            0
        ]
    )


def test_stats_of_unknown_model_is_404(client: httpx.Client) -> None:
    assert client.get("/v1/models/ghost/stats").status_code == 404


def test_stats_fold_what_a_dead_worker_left(
    client: httpx.Client, model_name: str, api_settings: Any
) -> None:
    """Trials appended by a worker that died before folding them get counted anyway."""
    import asyncio

    from app.service.live_model import LiveModel
    from storage.client import close, connect
    from storage.codec import encode_instance
    from storage.repository import LearnGroup, ModelStore

    create(client, model_name, {"kind": "committee"})
    items = majority_items(30, 4)
    for item in items[:10]:
        client.post(f"/v1/models/{model_name}/learn", json=item)

    async def dead_worker() -> None:
        redis = connect(api_settings.redis_url)
        store = ModelStore(redis, api_settings.key_prefix)
        stored = await store.read(model_name)
        m = LiveModel(model_name, stored.incarnation, stored.config)
        xs = [(encode_instance(m.encode(i["instance"])), int(i["label"])) for i in items[10:]]
        await store.learn(
            model_name,
            stored.incarnation,
            0,
            fold=b"",
            limit=0,
            keep_ms=60_000,
            groups=[LearnGroup(xs)],
        )
        await close(redis)

    asyncio.run(dead_worker())
    first = client.get(f"/v1/models/{model_name}/stats").json()
    assert first["version"] == 30
    s = settled(client, model_name)
    assert s["folded"] == 30 and s["summary_version"] == 30
    replayed = client.post(f"/v1/models/{model_name}/learn/batch", json={"items": items})
    assert replayed.status_code == 200  # and the model goes on


def test_the_curve_is_shown_anew_once_it_moved(client: httpx.Client, model_name: str) -> None:
    create(client, model_name, {"kind": "committee", "alpha": 1.3})
    shown = []
    for seed in range(3):
        assert all(i["error"] is None for i in learn_batch(client, model_name, 30, seed))
        s = settled(client, model_name)
        assert s["curve"][-1] == [s["version"], s["mistakes"]]
        shown.append(s["curve"])
    assert [len(c) for c in shown] == [30, 60, 90]
    assert shown[1][:30] == shown[0] and shown[2][:60] == shown[1]  # the same points, and more
