"""The WebSocket stream: the REST semantics over one connection."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
import websockets

from models.inputs.datasets import MajorityProblem

FUSION = {
    "labels": ["cat", "dog"],
    "input": {"experts": {"expert_names": ["a", "b"]}},
    "learner": {"kind": "committee"},
}


def ws_url(api_url: str, name: str) -> str:
    return api_url.replace("http://", "ws://") + f"/v1/models/{name}/stream"


async def exchange(url: str, messages: list[Any]) -> list[dict[str, Any]]:
    async with websockets.connect(url) as ws:
        for m in messages:
            await ws.send(m if isinstance(m, str) else orjson.dumps(m).decode())
        return [orjson.loads(await ws.recv()) for _ in messages]


def test_stream_predict_label_learn(api_url: str, client: httpx.Client, model_name: str) -> None:
    client.post("/v1/models", json={"name": model_name, **FUSION})
    inst = {"experts": {"a": "cat", "b": "dog"}}
    msgs: list[Any] = [
        {"op": "predict", "id": 1, "instance": inst, "trial_id": "t1"},
        {"op": "label", "id": "two", "trial_id": "t1", "label": "dog"},
        {"op": "label", "id": 3, "trial_id": "t1", "label": "dog"},
        {"op": "label", "id": 4, "trial_id": "t1", "label": "cat"},
        {"op": "learn", "id": 5, "instance": inst, "label": "cat"},
        "not json",
        {"op": "fly", "id": 7},
        {"op": "learn", "id": 8, "instance": {"experts": {"zz": "cat"}}, "label": "cat"},
        {"op": "label", "id": 9, "trial_id": "t1"},
        {"op": "predict", "id": 10, "instance": inst, "track": False},
    ]
    got = asyncio.run(exchange(ws_url(api_url, model_name), msgs))
    assert [g["id"] for g in got] == [1, "two", 3, 4, 5, None, 7, 8, 9, 10]
    assert got[0]["result"]["trial_id"] == "t1" and got[0]["result"]["label"] == "cat"
    assert got[1]["result"] == got[2]["result"]  # exactly once
    assert got[1]["result"]["mistake"] is True and got[1]["result"]["updated"] is True
    assert got[3]["error"]["status"] == 409
    assert got[4]["result"]["label"] == "cat"
    assert got[5]["error"]["field"] == "message" and got[6]["error"]["field"] == "op"
    assert got[7]["error"]["status"] == 422 and "zz" in got[7]["error"]["message"]
    assert got[8]["error"]["field"] == "label"
    assert got[9]["result"]["trial_id"] is None
    assert client.get(f"/v1/models/{model_name}").json()["version"] == 2


def test_unknown_model_closes_with_4404(api_url: str) -> None:
    async def go() -> int | None:
        async with websockets.connect(ws_url(api_url, "ghost")) as ws:
            with pytest.raises(websockets.ConnectionClosed):
                await ws.recv()
            return ws.close_code

    assert asyncio.run(go()) == 4404


def test_pipelined_stream_equals_rest(api_url: str, client: httpx.Client, model_name: str) -> None:
    """Many requests in flight are applied in order, as the same trials one by one."""
    problem = MajorityProblem(n=20, r=10, k=5, noise=0.05)
    names = [f"e{i}" for i in range(problem.n_experts)]
    body = {
        "labels": list(range(5)),
        "input": {"experts": {"expert_names": names}},
        "learner": {"kind": "committee", "alpha": 1.2},
    }
    for name in (model_name, model_name + "-rest"):
        client.post("/v1/models", json={"name": name, **body})
    import numpy as np

    xs, ys, _ = problem.sample(400, np.random.default_rng(5))
    items = []
    for x, y in zip(xs, ys, strict=True):
        dense = x.dense(problem.n_experts, 5)
        votes = {names[e]: [float(v) for v in dense[e]] for e in range(problem.n_experts)}
        items.append({"instance": {"experts": votes}, "label": int(y)})
    msgs = [{"op": "learn", "id": i, **item} for i, item in enumerate(items)]
    got = asyncio.run(exchange(ws_url(api_url, model_name), msgs))
    rest = client.post(f"/v1/models/{model_name}-rest/learn/batch", json={"items": items})
    assert [g["result"] for g in got] == [i["result"] for i in rest.json()["items"]]
    a = client.get(f"/v1/models/{model_name}/state").json()["state"]
    b = client.get(f"/v1/models/{model_name}-rest/state").json()["state"]
    assert a == b


def test_the_stream_changes_the_input_as_rest_does(
    api_url: str, client: httpx.Client, model_name: str
) -> None:
    assert client.post("/v1/models", json={"name": model_name, **FUSION}).status_code == 201
    msgs: list[Any] = [
        {"op": "experts", "id": 1, "add": ["c"], "idempotency_key": "add-c"},
        {"op": "experts", "id": 2, "add": ["c"], "idempotency_key": "add-c"},  # a retry
        {"op": "learn", "id": 3, "instance": {"experts": {"c": "bird"}}, "label": "cat"},
        {"op": "labels", "id": 4, "add": ["bird"]},
        {"op": "learn", "id": 5, "instance": {"experts": {"c": "bird"}}, "label": "bird"},
        {"op": "experts", "id": 6, "retire": ["a"]},
        {"op": "learn", "id": 7, "instance": {"experts": {"a": "cat"}}, "label": "cat"},
        {"op": "features", "id": 8, "add": ["f"]},
        {"op": "experts", "id": 9},
        {"op": "labels", "id": 10, "add": "bird"},
    ]
    got = asyncio.run(exchange(ws_url(api_url, model_name), msgs))
    assert [g["id"] for g in got] == list(range(1, 11))
    first, retry = got[0]["result"], got[1]["result"]
    assert (
        (first["version"], first["input"])
        == (retry["version"], retry["input"])
        == (
            1,
            {
                "experts": {
                    **FUSION["input"]["experts"],
                    "expert_names": ["a", "b", "c"],
                    "normalize": "raw",
                    "threshold_experts": False,
                    "split_classes": None,
                },
                "generations": [[2, 0, 2], [3, 0, 2]],
            },
        )
    )  # applied once
    assert got[2]["error"]["status"] == 422  # "bird" is no label yet
    assert got[3]["result"]["labels"] == ["cat", "dog", "bird"]
    assert got[4]["result"]["label"] == "bird"
    assert got[5]["result"]["input"]["experts"]["retired"] == ["a"]
    assert got[6]["error"]["status"] == 422 and "retired" in got[6]["error"]["message"]
    assert got[7]["error"]["field"] == "features"
    assert got[8]["error"]["status"] == 422 and got[8]["error"]["field"] == "experts"
    assert got[9]["error"]["status"] == 422 and got[9]["error"]["field"] == "add"
    model = client.get(f"/v1/models/{model_name}").json()
    assert model["version"] == 4  # three changes and one learn
    assert model["input"] == got[5]["result"]["input"]


def test_a_refused_stream_fork_names_the_fields_its_message_gave(
    api_url: str, client: httpx.Client, model_name: str
) -> None:
    assert client.post("/v1/models", json={"name": model_name, **FUSION}).status_code == 201
    msgs: list[Any] = [
        {"op": "fork", "id": 1, "name": f"{model_name}-a", "version": -1},
        {"op": "fork", "id": 2, "name": f"{model_name}-b", "version": "0"},
        {"op": "fork", "id": 3, "name": f"{model_name}-c", "max_active": 0},
        {"op": "fork", "id": 4, "name": "no such name!"},
    ]
    got = asyncio.run(exchange(ws_url(api_url, model_name), msgs))
    assert [(g["error"]["status"], g["error"]["field"]) for g in got] == [
        (422, "version"),
        (422, "version"),
        (422, "max_active"),
        (422, "name"),
    ], got


def test_the_stream_rolls_back_and_backtests_as_rest_does(
    api_url: str, client: httpx.Client, model_name: str
) -> None:
    assert client.post("/v1/models", json={"name": model_name, **FUSION}).status_code == 201
    votes = [{"a": "cat", "b": "dog"}, {"a": "dog", "b": "dog"}, {"a": "cat", "b": "cat"}]
    learns = [
        {"op": "learn", "id": i, "instance": {"experts": v}, "label": "dog"}
        for i, v in enumerate(votes * 3)
    ]
    before = asyncio.run(exchange(ws_url(api_url, model_name), learns))
    assert all("result" in g for g in before)
    state_at_9 = client.get(f"/v1/models/{model_name}/state").json()["state"]
    msgs: list[Any] = [
        {"op": "rollback", "id": "r", "version": 3, "idempotency_key": "back-3"},
        {"op": "rollback", "id": "r2", "version": 3, "idempotency_key": "back-3"},  # a retry
        {"op": "backtest", "id": "b", "learner": {"kind": "committee", "alpha": 3}, "points": 5},
        {"op": "backtest", "id": "w", "learner": [{"kind": "committee"}], "wait": 0},
        {"op": "rollback", "id": "x", "version": 99},
        {"op": "backtest", "id": "y", "learner": {"kind": "winnow"}},
        {"op": "backtest", "id": "z", "learner": {"kind": "committee"}, "from": 1},
    ]
    got = asyncio.run(exchange(ws_url(api_url, model_name), msgs))
    assert [g["id"] for g in got] == ["r", "r2", "b", "w", "x", "y", "z"]
    assert got[0]["result"]["version"] == got[1]["result"]["version"] == 10  # once
    job = got[2]["result"]
    assert job["status"] == "done" and job["result"]["to_version"] == 10
    # from the creation: the model rebuilt after its rollback, the candidate learning on
    result = job["result"]
    assert result["from_version"] == 0 and result["resets"] == [10]
    assert result["model"]["trials"] == result["candidates"][0]["trials"] == 9
    assert result["model"]["stopped"] is None
    assert job["request"]["learners"] == [{"kind": "committee", "alpha": 3}]
    running = got[3]["result"]
    assert running["status"] == "running" and running["model"] == model_name
    assert got[4]["error"]["status"] == 422 and got[4]["error"]["field"] == "version"
    assert got[5]["error"]["status"] == 422 and got[5]["error"]["field"] == "learner.kind"
    assert got[6]["error"]["field"] == "from"
    assert client.get(f"/v1/models/{model_name}").json()["version"] == 10
    assert state_at_9 != client.get(f"/v1/models/{model_name}/state").json()["state"]


def test_an_integral_float_is_an_integer_label_over_the_stream(
    api_url: str, client: httpx.Client, model_name: str
) -> None:
    """As over REST: 2.0 is the label 2, in plain and parsed messages alike; 2.5, true and
    an integer beyond 64 bits are refused naming the label."""
    model = {
        "labels": [1, 2],
        "input": {"attributes": {"n_features": 2}},
        "learner": {"kind": "winnow"},
    }
    assert client.post("/v1/models", json={"name": model_name, **model}).status_code == 201
    x = {"features": [1, 0]}
    msgs: list[Any] = [
        {"op": "learn", "id": 1, "instance": x, "label": 2.0},
        {"op": "predict", "id": 2, "instance": x, "trial_id": "t1"},
        {"op": "label", "id": 3, "trial_id": "t1", "label": 1.0},
        *(
            {"op": "learn", "id": 4 + i, "instance": x, "label": bad}
            for i, bad in enumerate((2.5, True, 2**63))
        ),
    ]
    got = asyncio.run(exchange(ws_url(api_url, model_name), msgs))
    assert got[0]["result"]["label"] == 2 and got[2]["result"]["label"] == 1, got
    assert [g["error"]["field"] for g in got[3:]] == ["label"] * 3, got
