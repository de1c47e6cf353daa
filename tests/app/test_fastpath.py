"""The trial calls answer the same through the fast path and through FastAPI's router."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from app.core.settings import Settings
from app.http import bodies
from app.http.fastpath import TrialFastPath
from app.http.main import create_app
from app.http.routers import stats, trials

FUSION = {
    "labels": ["cat", "dog"],
    "input": {"experts": {"expert_names": ["a", "b"]}},
    "learner": {"kind": "committee"},
}


@pytest.fixture(scope="module")
def router_only(api_settings: Settings, server_thread: Any) -> Iterator[str]:
    """The same app, on the same Redis and key prefix, with the fast path taken out."""
    app = create_app(api_settings)
    app.user_middleware = [m for m in app.user_middleware if m.cls is not TrialFastPath]
    with server_thread(api_settings, app=app) as server:
        yield server.url


def calls(name: str) -> list[tuple[str, Any]]:
    inst = {"experts": {"a": "cat", "b": "dog"}}
    return [
        ("learn", {"instance": inst, "label": "dog"}),
        ("learn", {"instance": {"experts": {"zz": "cat"}}, "label": "dog"}),
        ("learn", {"instance": inst, "label": "cow"}),
        ("learn", {"instance": inst}),
        ("learn", b'{"instance": {"experts": {"a": NaN}}, "label": "dog"}'),
        ("learn", b"not json"),
        ("predict", {"instance": inst, "trial_id": f"{name}-1"}),
        ("predict", {"instance": inst, "trial_id": f"{name}-1"}),
        ("predict", {"instance": inst, "track": False}),
        ("label", {"trial_id": f"{name}-1", "label": "cat"}),
        ("label", {"trial_id": f"{name}-1", "label": "cat"}),
        ("label", {"trial_id": f"{name}-1", "label": "dog"}),
        ("label", {"trial_id": "nope", "label": "dog"}),
        (
            "learn/batch",
            {"items": [{"instance": inst, "label": "cat"}, {"instance": {}, "label": 3}]},
        ),
        ("predict/batch", {"items": [{"instance": inst, "trial_id": f"{name}-2"}]}),
        ("label/batch", {"items": [{"trial_id": f"{name}-2", "label": "dog"}]}),
        ("learn/batch", {"items": []}),
    ]


def run(url: str, name: str) -> list[tuple[int, Any]]:
    out = []
    with httpx.Client(base_url=url) as c:
        assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
        for call, body in calls("t"):
            path = f"/v1/models/{name}/{call}"
            if isinstance(body, bytes):
                r = c.post(path, content=body, headers={"content-type": "application/json"})
            else:
                r = c.post(path, json=body)
            out.append((r.status_code, r.json()))
        out.append((0, c.get(f"/v1/models/{name}/state").json()["state"]))
        for path in (
            f"/v1/models/{name}/stats",
            "/v1/models/no-such/stats",
            "/v1/models/b@d/stats",
        ):
            r = c.get(path)
            doc = r.json()
            if r.status_code == 200:  # the document's fields; its counts depend on the fold
                doc = sorted(doc) if doc.pop("name") == name else doc
            out.append((r.status_code, doc))
    return out


def test_same_answers(api_url: str, router_only: str, model_name: str) -> None:
    fast = run(api_url, model_name + "-fast")
    slow = run(router_only, model_name + "-slow")
    assert [s for s, _ in fast] == [
        200,
        422,
        422,
        422,
        422,
        422,
        200,
        200,
        200,
        200,
        200,
        409,
        404,
        200,
        200,
        200,
        422,
        0,
        200,
        404,
        422,
    ]
    for (call, _), (fs, fb), (ss, sb) in zip(calls("t"), fast, slow, strict=False):
        assert (fs, fb) == (ss, sb), call
    assert fast[-1] == slow[-1]


def test_the_statistics_read_is_served_ahead_of_the_router(
    api_settings: Settings, server_thread: Any, model_name: str
) -> None:
    """With the router's stats route taken out once the app has started (its route table
    built), the read is still answered (by the fast path), and the other routes still go
    through the router."""
    app = create_app(api_settings)
    with server_thread(api_settings, app=app) as server, httpx.Client(base_url=server.url) as c:
        routes = app.router.routes
        app.router.routes = [
            r for r in routes if getattr(r, "original_router", None) is not stats.router
        ]
        assert len(app.router.routes) == len(routes) - 1  # the stats route is gone
        assert c.post("/v1/models", json={"name": model_name, **FUSION}).status_code == 201
        r = c.get(f"/v1/models/{model_name}/stats")
        assert r.status_code == 200, r.text
        assert r.json()["name"] == model_name and r.json()["predictions"] == 0
        assert c.get(f"/v1/models/{model_name}").status_code == 200


def test_a_batch_read_in_one_pass_is_served_as_one_parsed(api_url: str, model_name: str) -> None:
    """The same trials, once as plain fusion batches (read in one compiled pass) and once
    with a null ``features`` in each instance (which that pass leaves to the parser):
    the same answers and the same state."""
    rng = random.Random(7)
    votes = [
        {
            e: {"cat": round(rng.random(), 4), "dog": round(rng.random(), 4)}
            if rng.random() < 0.8
            else "cat"
            for e in ("a", "b")
        }
        for _ in range(40)
    ]
    labels = [rng.choice(["cat", "dog"]) for _ in votes]
    answers = []
    with httpx.Client(base_url=api_url) as c:
        for side, extra in (("one-pass", {}), ("parsed", {"features": None})):
            name = f"{model_name}-{side}"
            assert c.post("/v1/models", json={"name": name, **FUSION}).status_code == 201
            learn = [
                {"instance": {"experts": v, **extra}, "label": y}
                for v, y in zip(votes, labels, strict=True)
            ]
            predict = [
                {"instance": {"experts": v, **extra}, "trial_id": f"t{i}"}
                for i, v in enumerate(votes)
            ]
            body = orjson.dumps({"items": learn})
            read = bodies.read_batch(body, *trials._LEARN_FIELDS, trials._BATCH_TOP, 100)
            assert (read is not None) == (side == "one-pass")
            got = [
                c.post(f"/v1/models/{name}/learn/batch", json={"items": learn[:30]}),
                c.post(f"/v1/models/{name}/predict/batch", json={"items": predict, "track": True}),
                c.post(f"/v1/models/{name}/learn/batch", json={"items": learn[30:]}),
            ]
            assert [r.status_code for r in got] == [200, 200, 200]
            state = c.get(f"/v1/models/{name}/state").json()["state"]
            answers.append(([r.json() for r in got], state))
    assert answers[0] == answers[1]
    predicted = answers[0][0][1]["items"]
    assert len(predicted) == 40
    assert all(i["error"] is None for i in predicted)


def test_hostile_fusion_batches_are_refused_by_name_and_leave_the_model_well(
    api_url: str, model_name: str
) -> None:
    item = {"instance": {"experts": {"a": {"cat": 0.5}, "b": "dog"}}, "label": "cat"}
    one = orjson.dumps(item)
    with httpx.Client(base_url=api_url, timeout=60) as c:
        assert c.post("/v1/models", json={"name": model_name, **FUSION}).status_code == 201
        path = f"/v1/models/{model_name}/learn/batch"

        def post(body: bytes) -> httpx.Response:
            return c.post(path, content=body, headers={"content-type": "application/json"})

        too_many = post(b'{"items": [' + b",".join([one] * 10_001) + b"]}")
        assert too_many.status_code == 422
        assert "10001 items: expected at most 10000" in too_many.text
        empty_items = post(b'{"items": [' + b",".join([b"{}"] * 50_000) + b"]}")
        assert empty_items.status_code == 422
        assert '"items",0,"instance"' in empty_items.text.replace(" ", "")
        for body in (
            b'{"items": [' + one + b', {"instance": {"experts": {"\xff": 1}}, "label": "cat"}]}',
            b'{"items": [' + one + b"," + b"[" * 10_000 + b"]" * 10_000 + b"]}",
            b'{"items": [' + one + b"]",
            b'{"items": []}',
        ):
            got = post(body)
            assert got.status_code == 422, (body[:80], got.text[:200])
            assert "items" in got.text
        mixed = post(
            b'{"items": [' + one + b', {"instance": {"experts": {"zz": "cat"}}, "label": "dog"}]}'
        )
        assert mixed.status_code == 200
        results = mixed.json()["items"]
        assert results[0]["error"] is None and results[1]["result"] is None
        assert "items.1." in orjson.dumps(results[1]["error"]).decode()
        after = post(b'{"items": [' + one + b"]}")
        assert after.status_code == 200 and after.json()["items"][0]["error"] is None
        assert c.get(f"/v1/models/{model_name}/stats").json()["learned"] == 2
