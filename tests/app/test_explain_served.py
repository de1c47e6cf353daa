"""Explained predicts served: the parts in the answer add up to the scores it gives, over
REST, batch, the stream and the Python client; an explained predict keeps the same trial
and state as an unexplained one; a kind without parts is a 422 naming it."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
import websockets

from committee_client import Client, InvalidInput
from models.learners.fusion import FUSION_INPUT

LABELS = ["cat", "dog", "bird"]
EXPERTS = ["cnn", "svm", "knn"]
# experts with their features and a threshold sub-expert per label: every part has a name
MIXED = {
    "labels": LABELS,
    "input": {
        "attributes": {"feature_names": ["size", "fur"]},
        "experts": {"expert_names": EXPERTS, "threshold_experts": True},
    },
}
PERCEPTRON = {
    "labels": ["spam", "ham"],
    "input": {"attributes": {"feature_names": list("abcdef"), "constant_attribute": True}},
    "learner": {"kind": "perceptron"},
}


def _instance(i: int) -> dict[str, Any]:
    votes = {
        "cnn": LABELS[i % 3],
        "svm": {LABELS[(i + 1) % 3]: 0.7, LABELS[i % 3]: 0.3},
        "knn": [0.2, 0.5, 0.3] if i % 4 else None,
    }
    return {"features": {"size": (i % 5) / 4, "fur": float(i % 2)}, "experts": votes}


def _make(c: httpx.Client, name: str, spec: dict[str, Any], learns: int = 40) -> None:
    r = c.post("/v1/models", json={"name": name, **spec})
    assert r.status_code == 201, r.text
    items = [{"instance": _instance(i), "label": LABELS[(i * 7) % 3]} for i in range(learns)]
    if spec is PERCEPTRON:
        items = [
            {"instance": {"features": {"a": 1.0, "b": float(i % 3 == 0), "c": (i % 5) / 4}},
             "label": "spam" if i % 3 == 0 else "ham"}
            for i in range(learns)
        ]  # fmt: skip
    if items:
        r = c.post(f"/v1/models/{name}/learn/batch", json={"items": items})
        assert r.status_code == 200, r.text


def _adds_up(answer: dict[str, Any], top: int | None = None) -> None:
    """The explanation's parts give each label's score, and list at most ``top`` inputs."""
    e = answer["explanation"]
    assert set(e["labels"]) == set(answer["scores"])
    for label, part in e["labels"].items():
        total = part["constant"] + sum(c["value"] for c in part["contributions"]) + part["rest"]
        size = abs(part["constant"]) + sum(abs(c["value"]) for c in part["contributions"])
        size += abs(part["rest"]) + 1e-300
        assert abs(total - answer["scores"][label]) <= 1e-12 * size, (label, part, answer)
        if top is not None:
            assert len(part["contributions"]) <= top
        values = [abs(c["value"]) for c in part["contributions"]]
        assert values == sorted(values, reverse=True)


@pytest.mark.parametrize(
    "learner",
    [
        {"kind": "committee", "alpha": 1.5},
        {"kind": "multiclass-winnow", "alpha": 0.5},
        {"kind": "subexpert", "learner": {"kind": "balanced-winnow", "alpha": 1.3}},
        {"kind": "averaging", "learner": {"kind": "subexpert", "learner": {"kind": "perceptron"}}},
        {"kind": "recycling", "learner": {"kind": "committee"}, "size": 5},
    ],
    ids=lambda s: s["kind"] + ("-" + s["learner"]["kind"] if "learner" in s else ""),
)
def test_explained_predicts_add_up_to_their_scores(
    client: httpx.Client, model_name: str, learner: dict[str, Any]
) -> None:
    _make(client, model_name, {**MIXED, "learner": learner})
    for i in range(6):
        r = client.post(
            f"/v1/models/{model_name}/predict",
            json={"instance": _instance(i), "explain": True, "explain_top": 2},
        )
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["explanation"]["kind"] == learner["kind"]
        _adds_up(answer, top=2)
        names = {
            c["input"] for p in answer["explanation"]["labels"].values() for c in p["contributions"]
        }
        assert names <= {"expert:cnn", "expert:svm", "expert:knn", "feature:size", "feature:fur"}


def test_a_fusion_model_explains_each_experts_weight(client: httpx.Client, model_name: str) -> None:
    spec = {
        "labels": LABELS,
        "input": {"experts": {**FUSION_INPUT, "expert_names": EXPERTS}},
        "learner": {"kind": "fusion"},
    }
    r = client.post("/v1/models", json={"name": model_name, **spec})
    assert r.status_code == 201, r.text
    for i in range(20):
        body = {"instance": {"experts": _instance(i)["experts"]}, "label": LABELS[i % 3]}
        assert client.post(f"/v1/models/{model_name}/learn", json=body).status_code == 200
    instance = {"experts": {"cnn": "cat", "svm": "dog", "knn": [0.1, 0.2, 0.7]}}
    r = client.post(
        f"/v1/models/{model_name}/predict",
        json={"instance": instance, "explain": True, "explain_top": 1000},
    )
    assert r.status_code == 200, r.text
    answer = r.json()
    _adds_up(answer)
    cat = {c["input"] for c in answer["explanation"]["labels"]["cat"]["contributions"]}
    assert "expert:cnn" in cat and "expert:svm" not in cat  # each votes for its top label


def test_an_attribute_model_names_features_and_keeps_the_bias_apart(
    client: httpx.Client, model_name: str
) -> None:
    _make(client, model_name, PERCEPTRON)
    instance = {"features": {"a": 1.0, "b": 1.0, "c": 0.5, "d": 1.0}}
    r = client.post(
        f"/v1/models/{model_name}/predict",
        json={"instance": instance, "explain": True, "explain_top": 1, "track": False},
    )
    assert r.status_code == 200, r.text
    answer = r.json()
    _adds_up(answer, top=1)
    spam = answer["explanation"]["labels"]["spam"]
    assert spam["contributions"][0]["input"].startswith("feature:")
    assert answer["trial_id"] is None


def _state(c: httpx.Client, name: str) -> Any:
    r = c.get(f"/v1/models/{name}/state")
    assert r.status_code == 200, r.text
    return r.json()


def _log(c: httpx.Client, name: str) -> list[dict[str, Any]]:
    r = c.get(f"/v1/models/{name}/log")
    assert r.status_code == 200, r.text
    return [orjson.loads(line) for line in r.content.splitlines()]


def _model(c: httpx.Client, name: str) -> dict[str, Any]:
    doc = c.get(f"/v1/models/{name}").json()
    return {k: doc[k] for k in ("version", "folded", "counters")}


def test_explaining_keeps_the_trial_and_state_of_a_plain_predict(
    client: httpx.Client, model_name: str
) -> None:
    """Two models alike: one predicts plainly, the other explained, the same trials; then
    both are labelled. Answers (bar the explanation), state, counters and log agree."""
    plain, explained = f"{model_name}-p", f"{model_name}-e"
    learner = {"kind": "averaging", "learner": {"kind": "committee"}}
    for name in (plain, explained):
        _make(client, name, {**MIXED, "learner": learner}, learns=15)
    for i in range(8):
        body: dict[str, Any] = {"instance": _instance(i), "trial_id": f"t{i}"}
        a = client.post(f"/v1/models/{plain}/predict", json=body).json()
        b = client.post(f"/v1/models/{explained}/predict", json={**body, "explain": True}).json()
        assert "explanation" not in a
        _adds_up(b)
        assert a == {k: v for k, v in b.items() if k != "explanation"}
        assert _state(client, plain) == _state(client, explained)
        assert _model(client, plain) == _model(client, explained)
        label = {"trial_id": f"t{i}", "label": LABELS[i % 3]}
        la = client.post(f"/v1/models/{plain}/label", json=label)
        lb = client.post(f"/v1/models/{explained}/label", json=label)
        assert la.status_code == lb.status_code == 200
        assert la.json() == lb.json()
    assert _state(client, plain) == _state(client, explained)
    assert _model(client, plain) == _model(client, explained)
    log_a, log_b = _log(client, plain), _log(client, explained)
    assert len(log_a) == 15 + 8
    assert log_a == log_b
    assert {e["kind"] for e in log_a[15:]} == {"label"}


def test_a_retried_explained_predict_answers_as_first_served(
    client: httpx.Client, model_name: str
) -> None:
    _make(client, model_name, {**MIXED, "learner": {"kind": "committee"}}, learns=10)
    body = {"instance": _instance(1), "trial_id": "again", "explain": True}
    first = client.post(f"/v1/models/{model_name}/predict", json=body).json()
    again = client.post(f"/v1/models/{model_name}/predict", json=body).json()
    assert first == again
    _adds_up(again)


@pytest.mark.parametrize(
    ("learner", "labels", "kind"),
    [
        ({"kind": "ecoc", "learner": {"kind": "perceptron"}}, LABELS, "ecoc"),
        ({"kind": "bagging", "learner": {"kind": "perceptron"}}, ["spam", "ham"], "bagging"),
        ({"kind": "boosting", "learner": {"kind": "perceptron"}}, ["spam", "ham"], "boosting"),
    ],
)
def test_a_kind_without_parts_is_a_422_naming_it(
    client: httpx.Client, model_name: str, learner: dict[str, Any], labels: list[str], kind: str
) -> None:
    spec = {"labels": labels, "input": {"attributes": {"n_features": 3}}, "learner": learner}
    assert client.post("/v1/models", json={"name": model_name, **spec}).status_code == 201
    instance = {"features": [1, 0, 1]}
    path = f"/v1/models/{model_name}/predict"
    r = client.post(path, json={"instance": instance, "explain": True, "trial_id": "t1"})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "explain"]
    assert detail["msg"].startswith(f"{kind} predictions cannot be explained")
    batch = {"items": [{"instance": instance}, {"instance": instance, "explain": True}]}
    r = client.post(f"{path}/batch", json=batch)
    assert r.status_code == 422 and kind in r.text
    # nothing was kept: the same trial id is free for a plain predict, and nothing waits
    assert client.get(f"/v1/models/{model_name}/stats").json()["pending"] == 0
    r = client.post(path, json={"instance": instance, "trial_id": "t1"})
    assert r.status_code == 200, r.text
    assert "explanation" not in r.json()


def test_explain_top_is_bounded(client: httpx.Client, model_name: str) -> None:
    _make(client, model_name, PERCEPTRON, learns=0)
    path = f"/v1/models/{model_name}/predict"
    for top in (0, 1001, 2.5, "3"):
        body = {"instance": {"features": {"a": 1}}, "explain": True, "explain_top": top}
        r = client.post(path, json=body)
        assert r.status_code == 422, (top, r.text)
        assert r.json()["detail"][0]["loc"][-1] == "explain_top"
    r = client.post(path, json={"instance": {"features": {"a": 1}}, "explain": "yes"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "explain"


def test_a_batch_explains_the_items_that_ask(client: httpx.Client, model_name: str) -> None:
    _make(client, model_name, {**MIXED, "learner": {"kind": "committee"}})
    items = [
        {"instance": _instance(0), "explain": True},
        {"instance": _instance(1)},
        {"instance": _instance(2), "explain": True, "explain_top": 1},
        {"instance": {"experts": {"nobody": "cat"}}, "explain": True},
    ]
    r = client.post(f"/v1/models/{model_name}/predict/batch", json={"items": items})
    assert r.status_code == 200, r.text
    got = r.json()["items"]
    _adds_up(got[0]["result"])
    assert "explanation" not in got[1]["result"]
    _adds_up(got[2]["result"], top=1)
    assert got[3]["result"] is None and got[3]["error"]["status"] == 422


def test_the_stream_carries_explanations(
    api_url: str, client: httpx.Client, model_name: str
) -> None:
    _make(client, model_name, {**MIXED, "learner": {"kind": "committee"}})
    url = api_url.replace("http://", "ws://") + f"/v1/models/{model_name}/stream"
    messages = [
        {"op": "predict", "id": 1, "instance": _instance(0), "explain": True, "explain_top": 3},
        {"op": "predict", "id": 2, "instance": _instance(1)},
        {"op": "predict", "id": 3, "instance": _instance(2), "explain": True, "track": False},
        {"op": "predict", "id": 4, "instance": _instance(2), "explain": 1},
    ]

    async def exchange() -> list[dict[str, Any]]:
        async with websockets.connect(url) as ws:
            for m in messages:
                await ws.send(orjson.dumps(m).decode())
            return [orjson.loads(await ws.recv()) for _ in messages]

    got = {a["id"]: a for a in asyncio.run(exchange())}
    _adds_up(got[1]["result"], top=3)
    assert "explanation" not in got[2]["result"]
    _adds_up(got[3]["result"])
    assert got[3]["result"]["trial_id"] is None
    assert got[4]["error"]["status"] == 422 and got[4]["error"]["field"] == "explain"


def test_a_refused_explain_on_the_stream_spares_plain_predicts(
    api_url: str, client: httpx.Client, model_name: str
) -> None:
    spec = {
        "labels": LABELS,
        "input": {"attributes": {"n_features": 3}},
        "learner": {"kind": "ecoc", "learner": {"kind": "perceptron"}},
    }
    assert client.post("/v1/models", json={"name": model_name, **spec}).status_code == 201
    url = api_url.replace("http://", "ws://") + f"/v1/models/{model_name}/stream"
    x = {"features": [1, 0, 1]}
    messages = [
        {"op": "predict", "id": 1, "instance": x},
        {"op": "predict", "id": 2, "instance": x, "explain": True},
        {"op": "predict", "id": 3, "instance": x},
    ]

    async def exchange() -> list[dict[str, Any]]:
        async with websockets.connect(url) as ws:
            for m in messages:
                await ws.send(orjson.dumps(m).decode())
            return [orjson.loads(await ws.recv()) for _ in messages]

    got = {a["id"]: a for a in asyncio.run(exchange())}
    assert "result" in got[1] and "result" in got[3]
    assert got[2]["error"]["status"] == 422 and "ecoc" in got[2]["error"]["message"]


def test_the_python_client_returns_the_explanation(api_url: str, model_name: str) -> None:
    with Client(api_url, timeout=30) as c, httpx.Client(base_url=api_url, timeout=30) as h:
        _make(h, model_name, PERCEPTRON)
        instance = {"features": {"a": 1.0, "b": 1.0, "c": 0.5}}
        p = c.predict(model_name, instance, explain=True, explain_top=2)
        assert p.explanation is not None and p.explanation.kind == "perceptron"
        for label, part in p.explanation.labels.items():
            assert len(part.contributions) <= 2
            assert part.total() == pytest.approx(p.scores[label], rel=1e-12, abs=1e-12)
        assert c.predict(model_name, instance).explanation is None
        items = c.predict_batch(model_name, [instance, instance], explain=True)
        assert all(i.result is not None and i.result.explanation for i in items)
        with c.stream(model_name) as s:
            streamed = s.predict(instance, explain=True)
        assert streamed.explanation is not None
        ecoc = f"{model_name}-ecoc"
        h.post(
            "/v1/models",
            json={
                "name": ecoc,
                "labels": LABELS,
                "input": {"attributes": {"n_features": 3}},
                "learner": {"kind": "ecoc", "learner": {"kind": "perceptron"}},
            },
        )
        with pytest.raises(InvalidInput, match="ecoc"):
            c.predict(ecoc, {"features": [1, 0, 1]}, explain=True)
