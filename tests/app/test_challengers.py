"""Shadow challengers over HTTP: attached, judged on the live model's trials exactly as an
independent replay of its log judges them, promoted as one log entry, rolled back,
retired, and kept across a worker that starts from a snapshot."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
from _procs import Replay, Service, assert_same_state, replay, wait_folded

from app.core.settings import Settings
from models.registry import build
from storage.codec import held_or_decoded

LABELS = ["cat", "dog", "bird"]
FUSION = {
    "labels": LABELS,
    "input": {"experts": {"expert_names": ["cnn", "svm", "rf"], "threshold_experts": True}},
    "learner": {"kind": "committee", "alpha": 1.3},
}
WM = {"kind": "weighted-majority", "beta": 0.5}
VR = {"kind": "vr-combine"}


def _items(seed: int, n: int) -> list[dict[str, Any]]:
    """Trials where cnn is mostly right and the others guess."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        y = LABELS[int(rng.integers(3))]
        cnn = y if rng.random() < 0.8 else LABELS[int(rng.integers(3))]
        experts = {
            "cnn": cnn,
            "svm": LABELS[int(rng.integers(3))],
            "rf": LABELS[int(rng.integers(3))],
        }
        out.append({"instance": {"experts": experts}, "label": y})
    return out


def _learn(c: httpx.Client, name: str, items: list[dict[str, Any]]) -> None:
    r = c.post(f"/v1/models/{name}/learn/batch", json={"items": items})
    assert r.status_code == 200 and all("result" in i for i in r.json()["items"]), r.text


def _predict_then_label(c: httpx.Client, name: str, items: list[dict[str, Any]]) -> None:
    """Predict all, then label all: labels judged against predictions served earlier."""
    r = c.post(
        f"/v1/models/{name}/predict/batch",
        json={"items": [{"instance": i["instance"]} for i in items]},
    )
    assert r.status_code == 200, r.text
    ids = [i["result"]["trial_id"] for i in r.json()["items"]]
    r = c.post(
        f"/v1/models/{name}/label/batch",
        json={
            "items": [{"trial_id": t, "label": i["label"]} for t, i in zip(ids, items, strict=True)]
        },
    )
    assert r.status_code == 200 and all("result" in i for i in r.json()["items"]), r.text


def _oracle(rep: Replay, spec: dict[str, Any], attached: int) -> tuple[dict[str, int], Any]:
    """A fresh learner ``spec`` fed the log's trials after ``attached``, test then
    train, with the live learner's mistakes on the same trials (as the log has them)."""
    m = rep.model
    learner = build(spec, labels=m.labels, size=m.size)
    counts = {"trials": 0, "mistakes": 0, "live_mistakes": 0, "live_log_mistakes": 0}
    for seq in sorted(rep.y):
        if seq <= attached:
            continue
        (x,) = held_or_decoded([rep.x[seq]], m.size, m.k)
        y = rep.y[seq]
        predicted, _ = learner.trial(x, m.labels[y])
        counts["trials"] += 1
        counts["mistakes"] += predicted != y
        counts["live_mistakes"] += rep.predicted[seq] != y
        counts["live_log_mistakes"] += rep.own[seq] != y
    return counts, learner


def _field(r: httpx.Response) -> str:
    """The field a 422 names."""
    return ".".join(map(str, r.json()["detail"][0]["loc"][1:]))


def _figures(c: httpx.Client, name: str) -> dict[str, dict[str, Any]]:
    r = c.get(f"/v1/models/{name}/challengers")
    assert r.status_code == 200, r.text
    return {ch["name"]: ch for ch in r.json()["challengers"]}


def test_challengers_count_what_a_replay_of_the_log_counts(
    client: httpx.Client, model_name: str, api_settings: Settings
) -> None:
    c, name = client, model_name
    assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
    _learn(c, name, _items(1, 40))
    r = c.post(f"/v1/models/{name}/challengers", json={"name": "wm", "learner": WM})
    assert r.status_code == 201, r.text
    assert [ch["name"] for ch in r.json()["challengers"]] == ["wm"]
    assert (
        r.json()["challengers"][0]["attached"] == 41 and r.json()["challengers"][0]["trials"] == 0
    )
    _predict_then_label(c, name, _items(2, 30))
    assert (
        c.post(f"/v1/models/{name}/challengers", json={"name": "vr", "learner": VR}).status_code
        == 201
    )
    _learn(c, name, _items(3, 50))
    _predict_then_label(c, name, _items(4, 30))

    got = _figures(c, name)
    rep = replay(api_settings.redis_url, api_settings.key_prefix, name)
    for cname, spec in (("wm", WM), ("vr", VR)):
        want, _ = _oracle(rep, spec, got[cname]["attached"])
        assert {k: got[cname][k] for k in want} == want, cname
        assert got[cname]["error_rate"] == want["mistakes"] / want["trials"]
        assert got[cname]["curve"][-1] == [want["trials"], want["mistakes"], want["live_mistakes"]]
        assert got[cname]["learner"] == spec and got[cname]["skipped"] == 0
    assert got["wm"]["trials"] == 110 and got["vr"]["trials"] == 80
    # the live learner's mistakes on the same trials are the model's own on them
    stats = c.get(f"/v1/models/{name}/stats").json()
    assert stats["mistakes"] >= got["wm"]["live_mistakes"]

    # promoted: the model's learner is the challenger as it was, exactly
    version = c.get(f"/v1/models/{name}").json()["version"]
    r = c.post(f"/v1/models/{name}/challengers/wm/promote")
    assert r.status_code == 200, r.text
    assert [ch["name"] for ch in r.json()["challengers"]] == ["vr"]
    assert r.json()["learner"] == WM and r.json()["version"] == version + 1
    model = c.get(f"/v1/models/{name}").json()
    assert model["learner"] == WM
    _, oracle_learner = _oracle(rep, WM, got["wm"]["attached"])
    assert_same_state(
        c.get(f"/v1/models/{name}/state").json()["state"], oracle_learner.export_state()
    )
    _learn(c, name, _items(5, 20))  # and it learns on as the model's learner
    rep2 = replay(api_settings.redis_url, api_settings.key_prefix, name)
    assert_same_state(
        c.get(f"/v1/models/{name}/state").json()["state"], rep2.model.learner.export_state()
    )
    assert _figures(c, name)["vr"]["trials"] == 100

    # rolled back to before the promotion: the old learner and both challengers, as then
    r = c.post(f"/v1/models/{name}/rollback", json={"version": version})
    assert r.status_code == 200, r.text
    assert c.get(f"/v1/models/{name}").json()["learner"] == FUSION["learner"]
    back = _figures(c, name)
    assert back == got
    assert_same_state(
        c.get(f"/v1/models/{name}/state").json()["state"], rep.model.learner.export_state()
    )


def test_challenger_requests_are_checked(
    client: httpx.Client, model_name: str, api_settings: Settings
) -> None:
    c, name = client, model_name
    assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
    url = f"/v1/models/{name}/challengers"
    assert c.post(url, json={"name": "wm", "learner": WM}).status_code == 201
    r = c.post(url, json={"name": "wm", "learner": VR})
    assert r.status_code == 422 and _field(r) == "name" and "challenger of that name" in r.text
    r = c.post(url, json={"name": "w", "learner": {"kind": "winnow"}})
    assert r.status_code == 422 and _field(r) == "learner.kind", r.text
    r = c.post(url, json={"name": "w", "learner": {"kind": "weighted-majority", "beta": 7}})
    assert r.status_code == 422 and _field(r) == "learner.beta", r.text
    r = c.post(url, json={"name": "-bad", "learner": WM})
    assert r.status_code == 422, r.text
    for i in range(api_settings.max_challengers - 1):
        assert c.post(url, json={"name": f"c{i}", "learner": WM}).status_code == 201
    r = c.post(url, json={"name": "one-more", "learner": WM})
    assert r.status_code == 422 and "max_challengers" in r.text, r.text
    assert c.post(f"{url}/nope/promote").status_code == 404
    assert c.delete(f"{url}/nope").status_code == 404
    assert c.delete(f"{url}/wm").status_code == 204
    assert c.delete(f"{url}/wm").status_code == 404
    assert "wm" not in _figures(c, name)
    assert c.get("/v1/models/no-such-model/challengers").status_code == 404
    # an Idempotency-Key makes a retried attach one attach
    h = {"Idempotency-Key": "attach-once-1"}
    assert c.delete(f"{url}/c0").status_code == 204
    first = c.post(url, json={"name": "again", "learner": WM}, headers=h)
    second = c.post(url, json={"name": "again", "learner": WM}, headers=h)
    assert first.status_code == second.status_code == 201, second.text
    assert [ch["name"] for ch in second.json()["challengers"]].count("again") == 1


@pytest.mark.parametrize("every", [7])
def test_challengers_survive_a_worker_that_starts_from_a_snapshot(
    api_settings: Settings, server_thread: Any, model_name: str, every: int
) -> None:
    settings = api_settings.model_copy(update={"snapshot_every": every})
    name = model_name
    with server_thread(settings) as one, httpx.Client(base_url=one.url, timeout=30) as c:
        assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
        _learn(c, name, _items(6, 10))
        assert (
            c.post(f"/v1/models/{name}/challengers", json={"name": "wm", "learner": WM}).status_code
            == 201
        )
        for seed in range(7, 12):  # snapshots are taken as trials cross multiples of 7
            _learn(c, name, _items(seed, 9))
        first = _figures(c, name)
        state = c.get(f"/v1/models/{name}/state").json()["state"]
    with server_thread(settings) as two, httpx.Client(base_url=two.url, timeout=30) as c:
        assert _figures(c, name) == first
        assert_same_state(c.get(f"/v1/models/{name}/state").json()["state"], state)
        _learn(c, name, _items(12, 5))
        assert _figures(c, name)["wm"]["trials"] == first["wm"]["trials"] + 5
    rep = replay(api_settings.redis_url, api_settings.key_prefix, name)
    want, _ = _oracle(rep, WM, first["wm"]["attached"])
    assert want["trials"] == first["wm"]["trials"] + 5


def test_on_four_workers_with_labels_raced_every_worker_answers_the_replay(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """Four clients predict and label (each its own trials, labels racing the others'
    predictions) on four workers; every worker answers the challengers' figures an
    independent replay of the log gives; the promotion is the replayed learner, and a
    service started again answers the same."""
    name = "raced"
    with Service(tmp_path, workers=4, redis_url=redis_url, prefix=redis_prefix) as svc:
        with httpx.Client(base_url=svc.url, timeout=60) as c:
            assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
            _learn(c, name, _items(20, 30))
            for cname, spec in (("wm", WM), ("vr", VR)):
                r = c.post(f"/v1/models/{name}/challengers", json={"name": cname, "learner": spec})
                assert r.status_code == 201, r.text

            def load(seed: int) -> None:
                with httpx.Client(
                    base_url=svc.url, timeout=60, headers={"Connection": "close"}
                ) as own:
                    for r in range(6):
                        _predict_then_label(own, name, _items(100 * seed + r, 15))
                        _learn(own, name, _items(1000 * seed + r, 5))

            threads = [threading.Thread(target=load, args=(s,)) for s in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wait_folded(c, name)
            answers = []
            for _ in range(12):  # over fresh connections: the four workers answer
                with httpx.Client(base_url=svc.url, timeout=60) as one:
                    answers.append(_figures(one, name))
            assert all(a == answers[0] for a in answers)
            got = answers[0]
            rep = replay(redis_url, redis_prefix, name)
            for cname, spec in (("wm", WM), ("vr", VR)):
                want, _ = _oracle(rep, spec, got[cname]["attached"])
                assert {k: got[cname][k] for k in want} == want, cname
                assert want["trials"] == 4 * 6 * 20
            r = c.post(f"/v1/models/{name}/challengers/vr/promote")
            assert r.status_code == 200, r.text
            state = c.get(f"/v1/models/{name}/state").json()["state"]
            _, vr = _oracle(rep, VR, got["vr"]["attached"])
            assert_same_state(state, vr.export_state())
            after = _figures(c, name)
        assert svc.stop() == 0
    with Service(tmp_path, workers=2, redis_url=redis_url, prefix=redis_prefix) as svc:
        with httpx.Client(base_url=svc.url, timeout=60) as c:
            assert c.get(f"/v1/models/{name}").json()["learner"] == VR
            assert _figures(c, name) == after
            assert_same_state(c.get(f"/v1/models/{name}/state").json()["state"], state)
        assert svc.stop() == 0


def test_a_backtest_and_a_fork_of_a_model_with_challengers_and_a_promoted_learner(
    client: httpx.Client, model_name: str, api_settings: Settings
) -> None:
    c, name = client, model_name
    assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
    _learn(c, name, _items(30, 20))
    assert (
        c.post(f"/v1/models/{name}/challengers", json={"name": "wm", "learner": WM}).status_code
        == 201
    )
    _learn(c, name, _items(31, 20))
    # snapshots and starts name the challengers: a candidate is built from the input alone
    r = c.post(f"/v1/models/{name}/backtest", json={"learner": VR, "from_version": 0, "wait": 60})
    assert r.status_code == 200 and r.json()["status"] == "done", r.text
    assert r.json()["result"]["candidates"][0]["trials"] == 40
    assert c.post(f"/v1/models/{name}/challengers/wm/promote").status_code == 200
    _learn(c, name, _items(32, 10))
    r = c.post(f"/v1/models/{name}/backtest", json={"learner": VR, "from_version": 0, "wait": 60})
    assert r.status_code == 200 and r.json()["status"] == "done", r.text
    # the candidate learns every trial, untouched by the model's challenger entries
    want, _ = _oracle(replay(api_settings.redis_url, api_settings.key_prefix, name), VR, 0)
    got = r.json()["result"]["candidates"][0]
    assert (
        (got["trials"], got["mistakes"])
        == (want["trials"], want["mistakes"])
        == (50, got["mistakes"])
    )
    fork = f"{name}-f"
    r = c.post("/v1/models", json={"name": fork, "from": {"model": name}})
    assert r.status_code == 201, r.text
    assert r.json()["learner"] == WM
    assert c.get(f"/v1/models/{fork}/challengers").json()["challengers"] == []
    assert_same_state(
        c.get(f"/v1/models/{fork}/state").json()["state"],
        c.get(f"/v1/models/{name}/state").json()["state"],
    )


def test_the_export_names_challenger_entries_and_an_import_refuses_them(
    client: httpx.Client, model_name: str
) -> None:
    c, name = client, model_name
    assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
    _learn(c, name, _items(40, 3))
    assert (
        c.post(f"/v1/models/{name}/challengers", json={"name": "wm", "learner": WM}).status_code
        == 201
    )
    _learn(c, name, _items(41, 2))
    r = c.get(f"/v1/models/{name}/log", params={"from": 0})
    assert r.status_code == 200, r.text
    lines = [orjson.loads(line) for line in r.content.splitlines() if line.strip()]
    assert [d["kind"] for d in lines] == ["learn"] * 3 + ["challenger"] + ["learn"] * 2
    assert lines[3]["challenger"] == {"op": "attach", "name": "wm", "learner": WM}
    copy = f"{name}-copy"
    assert c.post("/v1/models", json={"name": copy, **FUSION}).status_code == 201
    body = b"\n".join(orjson.dumps(d) for d in lines) + b"\n"
    r = c.post(
        f"/v1/models/{copy}/log",
        params={"import_id": "one", "first_line": 1},
        content=body,
        headers={"content-type": "application/x-ndjson"},
    )
    # refused as a reset is, naming the line: the copy gets the trials without it
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "lines", 4, "kind"]
    assert "challenger" in r.json()["detail"][0]["msg"]
    kept = [d for d in lines if d["kind"] != "challenger"]
    r = c.post(
        f"/v1/models/{copy}/log",
        params={"import_id": "two", "first_line": 1},
        content=b"\n".join(orjson.dumps(d) for d in kept) + b"\n",
        headers={"content-type": "application/x-ndjson"},
    )
    assert r.status_code == 200 and r.json()["applied"] == 5, r.text
    assert_same_state(
        c.get(f"/v1/models/{copy}/state").json()["state"],
        c.get(f"/v1/models/{name}/state").json()["state"],
    )
