"""Backtests: candidate learners replayed over a model's own log, beside the model, with
the result checked against the model's recorded mistakes and against an independent
replay of the log read from Redis."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
from _procs import Service, sync_client

from app.core.settings import Settings
from app.service.live_model import LiveModel
from storage.codec import decode_entry
from storage.keys import Keys

LABELS = ["cat", "dog", "bird"]
EXPERTS = ["cnn", "svm", "rf", "knn"]
FUSION = {
    "labels": LABELS,
    "input": {"experts": {"expert_names": EXPERTS, "threshold_experts": True}},
    "learner": {"kind": "committee", "alpha": 1.3},
}
OTHER = {"kind": "committee", "alpha": 2.0}


def _instance(rng: np.random.Generator, y: int) -> dict[str, Any]:
    """Experts that are right 80%, 70%, 60% and 40% of the time."""
    votes = {}
    for e, p in zip(EXPERTS, (0.8, 0.7, 0.6, 0.4), strict=True):
        votes[e] = LABELS[y] if rng.random() < p else LABELS[int(rng.integers(3))]
    return {"experts": votes}


def _traffic(c: httpx.Client, name: str, seed: int, rounds: int) -> None:
    """Learned trials, and tracked predictions labelled a few rounds later, shuffled."""
    rng = np.random.default_rng(seed)
    waiting: list[tuple[str, str]] = []
    for _ in range(rounds):
        ys = rng.integers(3, size=8)
        items = [{"instance": _instance(rng, int(y)), "label": LABELS[int(y)]} for y in ys[:4]]
        r = c.post(f"/v1/models/{name}/learn/batch", json={"items": items})
        assert r.status_code == 200, r.text
        for y in ys[4:]:
            got = c.post(f"/v1/models/{name}/predict", json={"instance": _instance(rng, int(y))})
            assert got.status_code == 200, got.text
            waiting.append((got.json()["trial_id"], LABELS[int(y)]))
        rng.shuffle(waiting)  # type: ignore[arg-type]
        for trial_id, label in waiting[:3]:
            r = c.post(f"/v1/models/{name}/label", json={"trial_id": trial_id, "label": label})
            assert r.status_code == 200, r.text
        del waiting[:3]


def _folded(c: httpx.Client, name: str) -> dict[str, Any]:
    """The model's stats once every trial is counted (fails after 20 s)."""
    deadline = time.monotonic() + 20
    while True:
        stats: dict[str, Any] = c.get(f"/v1/models/{name}/stats").json()
        if stats["folded"] == stats["version"]:
            return stats
        assert time.monotonic() < deadline, f"not folded: {stats['folded']} of {stats['version']}"
        time.sleep(0.05)


def _mistakes_by_replay(settings: Settings, name: str, spec: dict[str, Any]) -> tuple[int, int]:
    """(trials, mistakes) of a fresh ``spec`` over the model's whole log: every labelled
    prediction judged at the version that served it (all predictions made up front)."""
    keys = Keys(settings.key_prefix, name)
    with sync_client(settings.redis_url) as r:
        meta = r.hgetall(keys.meta)
        raw = [(i, [v for kv in f.items() for v in kv]) for i, f in r.xrange(keys.log, "-", "+")]
    config = {**orjson.loads(meta[b"config"]), "learner": spec}
    m = LiveModel(name, meta[b"incarnation"].decode(), config)
    served: dict[int, list[tuple[int, Any]]] = {}
    for entry_id, fields in raw:
        e = decode_entry(entry_id, fields, m.size, m.k)
        if e.kind == "label":
            assert 0 <= e.served_at < e.seq
            served.setdefault(e.served_at, []).append((e.seq, e.x))
    early: dict[int, int] = {}
    trials = mistakes = 0
    for version, (entry_id, fields) in enumerate(raw):
        for seq, x in served.get(version, []):
            early[seq] = m.space.class_of(m.learner.predict(x))
        e = decode_entry(entry_id, fields, m.size, m.k)
        predicted, _ = m.learner.trial(e.x, m.labels[e.y])
        trials += 1
        mistakes += (early.pop(e.seq) if e.kind == "label" else predicted) != e.y
    return trials, mistakes


def test_a_backtest_of_the_models_own_learner_reproduces_its_recorded_mistakes(
    client: httpx.Client, model_name: str, api_settings: Settings
) -> None:
    c, name = client, model_name
    assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
    _traffic(c, name, seed=3, rounds=40)
    stats = _folded(c, name)
    assert stats["labelled"] > 100 and stats["learned"] > 100

    r = c.post(
        f"/v1/models/{name}/backtest",
        json={"learner": [FUSION["learner"], OTHER], "from_version": 0, "points": 20},
    )
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["status"] == "done" and job["error"] is None, job
    result = job["result"]
    assert (result["from_version"], result["to_version"]) == (0, stats["version"])
    model, own, other = result["model"], *result["candidates"]
    # the model's mistakes as the service counted them live, on every trial
    assert model["trials"] == stats["version"]
    assert model["mistakes"] == stats["mistakes"]
    # its own learner, replayed fresh, makes exactly those, trial by trial
    assert own["learner"] == FUSION["learner"] and own["late"] == 0
    assert (own["trials"], own["mistakes"]) == (model["trials"], model["mistakes"])
    assert own["curve"] == model["curve"] and len(model["curve"]) <= 21
    assert model["curve"][-1] == [stats["version"], stats["mistakes"]]
    # another learner: as an independent replay of the log counts it
    assert other["learner"] == OTHER and other["late"] == 0
    expected = _mistakes_by_replay(api_settings, name, OTHER)
    assert (other["trials"], other["mistakes"]) == expected
    assert other["mistakes"] != model["mistakes"]  # (it is not the same learner)
    # and the job stays readable
    again = c.get(f"/v1/jobs/{job['id']}")
    assert again.status_code == 200 and again.json()["result"] == result


def test_mistakes_are_counted_from_the_version_asked_for(
    client: httpx.Client, model_name: str
) -> None:
    c, name = client, model_name
    assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
    _traffic(c, name, seed=4, rounds=20)
    stats = _folded(c, name)
    full = c.post(f"/v1/models/{name}/backtest", json={"learner": OTHER, "from_version": 0})
    half = c.post(f"/v1/models/{name}/backtest", json={"learner": OTHER, "from_version": 60})
    assert full.status_code == half.status_code == 200, (full.text, half.text)
    a, b = full.json()["result"], half.json()["result"]
    assert b["trained_from"] == 0 and b["from_version"] == 60
    assert b["model"]["trials"] == stats["version"] - 60
    # the candidate learned the first 60 trials uncounted: the rest are the full run's
    at_60 = next(m for v, m in a["candidates"][0]["curve"] if v == 60)
    assert b["candidates"][0]["mistakes"] == a["candidates"][0]["mistakes"] - at_60


def test_a_backtest_refuses_what_it_cannot_replay(client: httpx.Client, model_name: str) -> None:
    c, name = client, model_name
    assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
    _traffic(c, name, seed=5, rounds=2)
    url = f"/v1/models/{name}/backtest"

    def refused(body: dict[str, Any], status: int = 422) -> str:
        r = c.post(url, json=body)
        assert r.status_code == status, r.text
        return str(r.json()["detail"])

    assert "from_version" in refused({"learner": OTHER, "from_version": 10_000})
    assert "winnow takes attributes" in refused({"learner": {"kind": "winnow"}})
    bad = refused({"learner": [OTHER, {"kind": "committee", "alpha": -1}]})
    assert "['body', 'learner', '1', 'alpha']" in bad
    assert "backtest_max_learners" in refused({"learner": [OTHER] * 5})
    assert "bytes: at most" in refused({"learner": {**OTHER, "note": "x" * 300_000}})
    assert "learner" in refused({"learner": "committee"})
    assert "extra" in refused({"learner": OTHER, "fro_version": 1})
    assert c.post("/v1/models/nobody/backtest", json={"learner": OTHER}).status_code == 404
    assert c.get("/v1/jobs/" + "0" * 32).status_code == 404
    assert c.get("/v1/jobs/not-a-job").status_code == 422
    assert c.delete("/v1/jobs/" + "f" * 32).status_code == 404


def _long_model(c: httpx.Client, name: str, trials: int) -> None:
    """A model with ``trials`` learned trials: a backtest of it takes seconds."""
    assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
    rng = np.random.default_rng(9)
    for _ in range(trials // 2_000):
        ys = rng.integers(3, size=2_000)
        items = [{"instance": _instance(rng, int(y)), "label": LABELS[int(y)]} for y in ys]
        r = c.post(f"/v1/models/{name}/learn/batch", json={"items": items})
        assert r.status_code == 200, r.text


def _ended(c: httpx.Client, job_id: str) -> dict[str, Any]:
    """The job once it ended (fails after 120 s), checking each answer on the way."""
    deadline = time.monotonic() + 120
    while True:
        r = c.get(f"/v1/jobs/{job_id}")
        job: dict[str, Any] = r.json()
        if job["status"] != "running":
            assert r.status_code == 200, r.text
            return job
        assert r.status_code == 202 and r.headers["location"] == f"/v1/jobs/{job_id}"
        assert 0 <= job["progress"]["done"] <= job["progress"]["total"]
        assert time.monotonic() < deadline, job
        time.sleep(0.2)


def test_a_long_backtest_is_a_job_that_can_be_followed_retried_and_cancelled(
    client: httpx.Client, model_name: str
) -> None:
    c, name = client, model_name
    _long_model(c, name, 20_000)
    url = f"/v1/models/{name}/backtest"
    body = {"learner": [OTHER, FUSION["learner"], {"kind": "multiclass-winnow"}], "wait": 0}
    first = c.post(url, json=body, headers={"Idempotency-Key": "bt-1"})
    assert first.status_code == 202, first.text
    job = first.json()
    assert job["status"] == "running" and first.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["progress"] == {"done": 0, "total": 20_000}
    # a retry gets the same job; the same key with another request is refused
    again = c.post(url, json=body, headers={"Idempotency-Key": "bt-1"})
    assert again.status_code == 202 and again.json()["id"] == job["id"]
    other = c.post(url, json={**body, "points": 5}, headers={"Idempotency-Key": "bt-1"})
    assert other.status_code == 409, other.text
    # one at a time per worker (backtest_jobs): another is a 429 naming the limit
    busy = c.post(url, json={"learner": OTHER, "wait": 0})
    assert busy.status_code == 429, busy.text
    assert busy.json()["limit"] == "backtest_jobs"

    ended = _ended(c, job["id"])
    assert ended["status"] == "done" and ended["progress"]["done"] == 20_000
    result = ended["result"]
    assert [r["trials"] for r in (result["model"], *result["candidates"])] == [20_000] * 4
    own = result["candidates"][1]
    assert own["mistakes"] == result["model"]["mistakes"]

    # cancelled while it runs: it stops after its step and keeps what it counted
    # (a fourth candidate, the most allowed, so that it still runs after the request)
    started = c.post(url, json={**body, "learner": [*body["learner"], FUSION["learner"]]})
    assert started.status_code == 202, started.text
    job_id = started.json()["id"]
    asked = c.delete(f"/v1/jobs/{job_id}")
    assert asked.status_code == 202 and asked.json()["status"] == "running"
    cancelled = _ended(c, job_id)
    assert cancelled["status"] == "cancelled", cancelled
    assert cancelled["error"] == "cancelled on request"
    done = cancelled["progress"]["done"]
    assert done < 20_000 and cancelled["result"]["model"]["trials"] == done


def test_on_four_workers_the_models_own_learner_reproduces_its_recorded_mistakes(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """Four threads predict, label later and learn on a service of four workers, each
    worker serving predictions at whatever version it has: replayed, the model's own
    learner predicts each labelled instance where it was served, and makes exactly the
    mistakes the model counted."""
    name = "fused"
    with Service(tmp_path, workers=4, redis_url=redis_url, prefix=redis_prefix) as svc:
        with httpx.Client(base_url=svc.url, timeout=60) as c:
            assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201

            def load(seed: int) -> None:
                with httpx.Client(
                    base_url=svc.url, timeout=60, headers={"Connection": "close"}
                ) as own:
                    _traffic(own, name, seed=seed, rounds=10)

            threads = [threading.Thread(target=load, args=(s,)) for s in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            stats = _folded(c, name)
            assert stats["labelled"] >= 120 and stats["learned"] >= 160
            r = c.post(
                f"/v1/models/{name}/backtest",
                json={"learner": [FUSION["learner"], OTHER], "from_version": 0, "wait": 60},
            )
            assert r.status_code == 200, r.text
        assert svc.stop() == 0
    result = r.json()["result"]
    model, own, other = result["model"], *result["candidates"]
    assert model["mistakes"] == own["mistakes"] == stats["mistakes"]
    assert model["curve"] == own["curve"] and own["late"] == 0
    assert (other["trials"], other["mistakes"]) == _mistakes_by_replay(
        Settings(redis_url=redis_url, key_prefix=redis_prefix), name, OTHER
    )
