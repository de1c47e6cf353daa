"""Per-expert scorecards over HTTP: ``GET .../stats`` and ``/metrics`` show each
classifier's figures as the test counts them from the trials it sent and the labels and
predictions of the log; on four workers with labels raced, across a restart from a
snapshot, and for a classifier added live."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
from _procs import Replay, Service, replay, wait_folded
from harness.redis_cluster import sync_client
from prometheus_client.parser import text_string_to_metric_families

from app.core.settings import Settings
from models.core.instance import InvalidInstance
from models.inputs.space import InputSpace
from storage.codec import encode_instance
from storage.keys import Keys

LABELS = ["cat", "dog", "bird"]
NAMES = ["cnn", "svm", "rf", "knn"]
WINDOW, BLOCK = 1_000, 50  # the recent window and the sparkline's block, as documented


def model(names: list[str] = NAMES) -> dict[str, Any]:
    return {
        "labels": LABELS,
        "input": {
            "experts": {
                "expert_names": names,
                "normalize": ["sum-to-one", "rank"],
                "combinations": {"size": 2, "by": "score"},
            }
        },
        "learner": {"kind": "fusion"},
    }


def payloads(seed: int, n: int, names: list[str] = NAMES) -> list[dict[str, Any]]:
    """Trials whose cnn is mostly right; scores are small integers, so ties and zeros
    come often, and a classifier abstains now and then (left out, or all zeros)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        y = int(rng.integers(3))
        votes = {}
        for name in names:
            if rng.random() < 0.1:
                continue
            scores = rng.integers(0, 3, size=3)
            if name == "cnn" and rng.random() < 0.8:
                scores[y] = 3
            votes[name] = scores.tolist()
        out.append({"instance": {"experts": votes}, "label": LABELS[y]})
    return out


def top(scores: list[int]) -> int | None:
    """The label a classifier votes for: its highest score, ties to the first; None
    when it abstains (all zeros)."""
    return None if not any(scores) else scores.index(max(scores))


# -- the requests ------------------------------------------------------------------------


def learn(c: httpx.Client, name: str, items: list[dict[str, Any]]) -> None:
    r = c.post(f"/v1/models/{name}/learn/batch", json={"items": items})
    assert r.status_code == 200 and all("result" in i for i in r.json()["items"]), r.text


def predict_then_label(c: httpx.Client, name: str, items: list[dict[str, Any]]) -> None:
    """Predict all, then label all in reverse: judged by the predictions served."""
    r = c.post(
        f"/v1/models/{name}/predict/batch",
        json={"items": [{"instance": i["instance"]} for i in items]},
    )
    assert r.status_code == 200, r.text
    ids = [i["result"]["trial_id"] for i in r.json()["items"]]
    labels = [{"trial_id": t, "label": i["label"]} for t, i in zip(ids, items, strict=True)]
    r = c.post(f"/v1/models/{name}/label/batch", json={"items": labels[::-1]})
    assert r.status_code == 200 and all("result" in i for i in r.json()["items"]), r.text


def settled(c: httpx.Client, name: str) -> dict[str, Any]:
    """The stats once every trial is folded and the summary is at the last version."""
    deadline = time.monotonic() + 30
    while True:
        s: dict[str, Any] = c.get(f"/v1/models/{name}/stats").json()
        if s["folded"] == s["version"] == s["summary_version"]:
            return s
        if time.monotonic() > deadline:
            pytest.fail(f"stats of {name} did not settle: {s}")
        time.sleep(0.05)


# -- the independent count -----------------------------------------------------------------


def judged(rep: Replay, sent: Iterable[dict[str, Any]]) -> list[tuple[dict[str, Any], int, int]]:
    """The trials of the log in its order, as (votes sent, label, prediction judged by):
    each log entry found by its instance among those sent (payloads that encode alike
    vote alike: asserted)."""
    # each instance as the input now and as made encode it (the log holds it as the
    # input was when it was sent)
    spaces = [rep.model.space, InputSpace(LABELS, experts=model()["input"]["experts"])]
    by_x: dict[bytes, list[dict[str, Any]]] = {}
    for item in sent:
        for space in spaces:
            try:
                x = space.encode(item["instance"], "experts")
            except InvalidInstance:
                continue
            by_x.setdefault(encode_instance(x), []).append(item)
    out = []
    for seq in sorted(rep.y):
        items = by_x[rep.x[seq]]
        votes = items[0]["instance"]["experts"]
        tops = {tuple(top(v) for v in i["instance"]["experts"].values()) for i in items}
        assert len(tops) == 1 and len({tuple(i["instance"]["experts"]) for i in items}) == 1
        assert LABELS[rep.y[seq]] in {i["label"] for i in items}
        out.append((votes, rep.y[seq], rep.predicted[seq]))
    return out


def count(trials: list[tuple[dict[str, Any], int, int]], names: list[str]) -> list[dict[str, Any]]:
    """Each classifier's scorecard counted from ``trials`` (weight left out)."""
    cards = []
    for name in names:
        verdicts: list[bool] = []
        agreed = 0
        confusion: dict[str, dict[str, int]] = {}
        for votes, y, served in trials:
            t = top(votes[name]) if name in votes else None
            if t is None:
                continue
            verdicts.append(t != y)
            agreed += t == served
            row = confusion.setdefault(LABELS[y], {})
            row[LABELS[t]] = row.get(LABELS[t], 0) + 1
        recent = verdicts[-WINDOW:]
        n, wrong = len(verdicts), sum(verdicts)
        cards.append(
            {
                "expert": name,
                "trials": n,
                "mistakes": wrong,
                "error_rate": wrong / n if n else None,
                "recent": {
                    "trials": len(recent),
                    "mistakes": sum(recent),
                    "error_rate": sum(recent) / len(recent) if recent else None,
                },
                "confusion": confusion,
                "agreed": agreed,
                "agreement": agreed / n if n else None,
                "spark": [
                    sum(recent[a : a + BLOCK]) / len(recent[a : a + BLOCK])
                    for a in range(0, len(recent), BLOCK)
                ],
            }
        )
    return cards


def shown(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """The scorecards of ``stats`` as :func:`count` gives them (weight and retired apart)."""
    return [
        {k: v for k, v in card.items() if k not in ("weight", "retired")}
        for card in stats["scorecards"]
    ]


def weights(rep: Replay) -> dict[str, float]:
    """Each classifier's own sub-experts' weight in the replayed learner."""
    m = rep.model
    w = np.asarray(m.learner.weights(), dtype=np.float64)
    return {name: float(w[m.space.expert_slots(name)].sum()) for name in m.space.expert_names}


def metric_samples(c: httpx.Client, name: str) -> dict[tuple[str, str], float]:
    """The ``committee_expert_*`` samples of model ``name``, by (sample, expert)."""
    r = c.get("/metrics")
    assert r.status_code == 200, r.text
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            if s.name.startswith("committee_expert_") and s.labels.get("model") == name:
                out[(s.name, s.labels["expert"])] = s.value
    return out


# -- the tests -----------------------------------------------------------------------------


def test_stats_and_metrics_show_what_the_trials_and_the_log_give(
    client: httpx.Client, model_name: str, api_settings: Settings
) -> None:
    c, name = client, model_name
    assert c.post("/v1/models", json={"name": name, **model()}).status_code == 201
    sent = payloads(1, 60) + payloads(2, 40) + payloads(3, 1_100)
    learn(c, name, sent[:60])
    predict_then_label(c, name, sent[60:100])
    for a in range(100, len(sent), 275):
        learn(c, name, sent[a : a + 275])
    s = settled(c, name)
    rep = replay(api_settings.redis_url, api_settings.key_prefix, name)
    want = count(judged(rep, sent), NAMES)
    assert shown(s) == want
    assert [card["trials"] for card in want] > [WINDOW] * 4  # the window is full
    assert len(want[0]["spark"]) == WINDOW // BLOCK
    assert [card["weight"] for card in s["scorecards"]] == list(weights(rep).values())
    assert not any(card["retired"] for card in s["scorecards"])
    # the classifier most often right holds the most weight, and agrees most
    best = max(s["scorecards"], key=lambda card: card["weight"])
    assert best["expert"] == "cnn" and best["agreement"] == max(
        card["agreement"] for card in s["scorecards"]
    )

    samples = metric_samples(c, name)
    for card in s["scorecards"]:
        e = card["expert"]
        assert samples[("committee_expert_trials_total", e)] == card["trials"]
        assert samples[("committee_expert_mistakes_total", e)] == card["mistakes"]
        assert samples[("committee_expert_error_rate", e)] == pytest.approx(card["error_rate"])
        assert samples[("committee_expert_recent_error_rate", e)] == pytest.approx(
            card["recent"]["error_rate"]
        )
        assert samples[("committee_expert_agreement", e)] == pytest.approx(card["agreement"])
        assert samples[("committee_expert_weight", e)] == pytest.approx(card["weight"])


def test_models_without_experts_have_no_scorecards(client: httpx.Client, model_name: str) -> None:
    body = {
        "name": model_name,
        "labels": [0, 1],
        "input": {"attributes": {"n_features": 3}},
        "learner": {"kind": "perceptron"},
    }
    assert client.post("/v1/models", json=body).status_code == 201
    learn(client, model_name, [{"instance": {"features": [1, 0, 1]}, "label": 1}])
    s = settled(client, model_name)
    assert s["scorecards"] is None
    assert not any(n for n, _ in metric_samples(client, model_name))


@pytest.mark.parametrize("every", [7])
def test_scorecards_survive_a_restart_from_a_snapshot_and_follow_experts_added_live(
    api_settings: Settings, server_thread: Any, model_name: str, every: int
) -> None:
    settings = api_settings.model_copy(update={"snapshot_every": every})
    name = model_name
    sent = payloads(10, 50)
    with server_thread(settings) as one, httpx.Client(base_url=one.url, timeout=30) as c:
        assert c.post("/v1/models", json={"name": name, **model()}).status_code == 201
        for a in range(0, 50, 9):  # snapshots are taken as trials cross multiples of 7
            learn(c, name, sent[a : a + 9])
        first = settled(c, name)
    # the latest snapshot holds the scorecards' state
    with sync_client(api_settings.redis_url) as r:
        snapshot = r.hgetall(Keys(api_settings.key_prefix, name).snapshot)
    state = orjson.loads(snapshot[b"state"])
    assert int(snapshot[b"version"]) > 0 and "scorecards" in state["monitors"]

    with server_thread(settings) as two, httpx.Client(base_url=two.url, timeout=30) as c:
        assert settled(c, name)["scorecards"] == first["scorecards"]
        more = payloads(11, 20)
        learn(c, name, more)
        sent += more
        # a classifier added live is judged from then on; one retired no more
        r = c.post(f"/v1/models/{name}/experts", json={"add": ["late"], "retire": ["rf"]})
        assert r.status_code == 200, r.text
        later = payloads(12, 40, [*NAMES, "late"])
        for item in later:
            item["instance"]["experts"].pop("rf", None)
        predict_then_label(c, name, later[:20])
        learn(c, name, later[20:])
        sent += later
        s = settled(c, name)
    rep = replay(api_settings.redis_url, api_settings.key_prefix, name)
    trials = judged(rep, sent)
    assert shown(s) == count(trials, [*NAMES, "late"])
    late = s["scorecards"][-1]
    assert late["expert"] == "late" and late["trials"] == count(trials[-40:], ["late"])[0]["trials"]
    assert late["trials"] > 30 and not late["retired"]
    assert [card["retired"] for card in s["scorecards"]] == [False, False, True, False, False]


def test_on_four_workers_with_labels_raced_the_scorecards_are_the_count_of_the_log(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    name = "scored"
    lock = threading.Lock()
    sent: list[dict[str, Any]] = []
    with Service(tmp_path, workers=4, redis_url=redis_url, prefix=redis_prefix) as svc:
        with httpx.Client(base_url=svc.url, timeout=60) as c:
            assert c.post("/v1/models", json={"name": name, **model()}).status_code == 201

            def load(seed: int) -> None:
                with httpx.Client(
                    base_url=svc.url, timeout=60, headers={"Connection": "close"}
                ) as own:
                    for r in range(5):
                        asked = payloads(100 * seed + r, 15)
                        learned = payloads(1000 * seed + r, 5)
                        with lock:
                            sent.extend(asked + learned)
                        predict_then_label(own, name, asked)
                        learn(own, name, learned)

            threads = [threading.Thread(target=load, args=(s,)) for s in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wait_folded(c, name)
            s = settled(c, name)
            answers = []
            for _ in range(8):  # over fresh connections: the workers answer
                with httpx.Client(base_url=svc.url, timeout=60) as one:
                    answers.append(one.get(f"/v1/models/{name}/stats").json()["scorecards"])
            assert all(a == s["scorecards"] for a in answers)
        assert svc.stop() == 0
    rep = replay(redis_url, redis_prefix, name)
    trials = judged(rep, sent)
    assert len(trials) == 4 * 5 * 20
    assert shown(s) == count(trials, NAMES)
    assert [card["weight"] for card in s["scorecards"]] == list(weights(rep).values())
