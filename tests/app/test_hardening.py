"""Hostile and careless clients, over HTTP against the real app and Redis: stale workers,
re-created models, budgets, malformed bodies, guessable ids and retried writes."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
import websockets
from harness.redis_cluster import sync_client

from app.core.settings import Settings
from models.core.learner import UpdateRefused
from models.registry import build
from storage.keys import Keys

PETS = {
    "labels": ["cat", "dog", "bird"],
    "input": {"experts": {"expert_names": ["cnn", "svm"]}},
    "learner": {"kind": "committee"},
}
VOTE = {"experts": {"cnn": "dog", "svm": "cat"}}


def create(c: httpx.Client, name: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return c.post("/v1/models", json={"name": name, **body}, headers=headers)


@pytest.fixture(scope="module")
def two_workers(api_settings: Settings, server_thread: Any) -> Iterator[tuple[str, str]]:
    """Two app processes' worth of service (each its own replicas) over one prefix."""
    with server_thread(api_settings) as a, server_thread(api_settings) as b:
        yield a.url, b.url


def field(r: httpx.Response) -> str:
    return ".".join(str(p) for p in r.json()["detail"][0]["loc"])


# -- finding 1: a stale worker cannot apply an old incarnation's label -----------------


def test_a_stale_worker_never_sends_an_old_class_index(
    two_workers: tuple[str, str], model_name: str
) -> None:
    a_url, b_url = two_workers
    with (
        httpx.Client(base_url=a_url, timeout=60) as a,
        httpx.Client(base_url=b_url, timeout=60) as b,
    ):
        assert create(a, model_name, PETS).status_code == 201
        assert b.post(f"/v1/models/{model_name}/predict", json={"instance": VOTE}).is_success
        # through A: delete, re-create with fewer labels, predict t1
        assert a.delete(f"/v1/models/{model_name}").status_code == 204
        smaller = {**PETS, "labels": ["cat", "dog"]}
        assert create(a, model_name, smaller).status_code == 201
        body = {"instance": VOTE, "trial_id": "t1"}
        assert a.post(f"/v1/models/{model_name}/predict", json=body).is_success
        # through B, which still holds the three-label model: "bird" is not a label now
        r = b.post(f"/v1/models/{model_name}/label", json={"trial_id": "t1", "label": "bird"})
        assert r.status_code == 422 and "bird" in r.text, r.text
        for c in (a, b):  # and the model works on every worker
            assert c.post(f"/v1/models/{model_name}/predict", json=body).is_success
        # the labels' order changed: B learns "cat" as the new model's cat
        assert a.delete(f"/v1/models/{model_name}").status_code == 204
        assert create(a, model_name, {**PETS, "labels": ["dog", "cat"]}).status_code == 201
        assert a.post(f"/v1/models/{model_name}/predict", json=body).is_success
        r = b.post(f"/v1/models/{model_name}/label", json={"trial_id": "t1", "label": "cat"})
        assert r.status_code == 200 and r.json()["label"] == "cat", r.text
        state = a.get(f"/v1/models/{model_name}/state").json()
        assert state["model_version"] == 1
        assert b.get(f"/v1/models/{model_name}").json()["version"] == 1


# -- finding 2: create and delete are atomic -------------------------------------------


def test_an_old_trial_is_unknown_after_a_re_create(
    api_settings: Settings, client: httpx.Client, model_name: str
) -> None:
    assert create(client, model_name, PETS).status_code == 201
    body = {"instance": VOTE, "trial_id": "old"}
    assert client.post(f"/v1/models/{model_name}/predict", json=body).is_success
    # a delete that stopped after its first step (a crash), then the name is created again
    assert api_settings.redis_url is not None
    r = sync_client(api_settings.redis_url)
    try:
        r.delete(Keys(api_settings.key_prefix, model_name).meta)
    finally:
        r.close()
    assert create(client, model_name, PETS).status_code == 201
    r = client.post(f"/v1/models/{model_name}/label", json={"trial_id": "old", "label": "cat"})
    assert r.status_code == 404
    assert client.get(f"/v1/models/{model_name}").json()["version"] == 0
    assert client.delete(f"/v1/models/{model_name}").status_code == 204


def test_concurrent_delete_and_create_leave_the_name_listed_iff_readable(
    two_workers: tuple[str, str],
) -> None:
    async def race(name: str) -> None:
        async with (
            httpx.AsyncClient(base_url=two_workers[0], timeout=60) as a,
            httpx.AsyncClient(base_url=two_workers[1], timeout=60) as b,
        ):
            assert (await a.post("/v1/models", json={"name": name, **PETS})).status_code == 201
            for _ in range(30):
                await asyncio.gather(
                    *(a.delete(f"/v1/models/{name}") for _ in range(3)),
                    *(b.post("/v1/models", json={"name": name, **PETS}) for _ in range(3)),
                )
                listed = name in [m["name"] for m in (await a.get("/v1/models")).json()["models"]]
                readable = (await b.get(f"/v1/models/{name}")).status_code == 200
                assert listed == readable

    asyncio.run(race(f"m-{uuid.uuid4().hex[:12]}"))


# -- finding 3: budgets, checked before anything is allocated --------------------------


@pytest.mark.parametrize(
    ("body", "where", "words"),
    [
        (
            {
                "labels": [1, -1, 0],
                "input": {"attributes": {"n_features": 1048576}},
                "learner": {"kind": "vr-combine"},
            },
            "learner",
            "max_learner_bytes",
        ),
        (
            {
                "labels": ["a", "b"],
                "input": {"experts": {"expert_names": ["x"]}},
                "learner": {"kind": "v-combine", "learners": [{"kind": "committee"}] * 1000},
            },
            "learner",
            "",
        ),
        (
            {
                "labels": [1, -1],
                "input": {"attributes": {"n_features": 4}},
                "learner": {"kind": "balanced-winnow", "n_features": 9},
            },
            "learner.n_features",
            "",
        ),
        (
            {**PETS, "learner": {"kind": "committee", "labels": ["x", "y"]}},
            "learner.labels",
            "",
        ),
    ],
)
def test_a_spec_beyond_the_budget_is_422_naming_it(
    client: httpx.Client, model_name: str, body: dict[str, Any], where: str, words: str
) -> None:
    r = create(client, model_name, body)
    assert r.status_code == 422, r.text
    assert field(r).startswith(f"body.{where}") and words in r.text
    assert client.get(f"/v1/models/{model_name}").status_code == 404


def test_a_deeply_nested_spec_is_422(client: httpx.Client, model_name: str) -> None:
    spec: dict[str, Any] = {"kind": "perceptron"}
    for _ in range(300):
        spec = {"kind": "averaging", "learner": spec}
    body = {"labels": [1, -1], "input": {"attributes": {"n_features": 4}}, "learner": spec}
    r = create(client, model_name, body)
    assert r.status_code == 422 and field(r).startswith("body.learner"), r.text


# -- finding 4: amplification -----------------------------------------------------------


@pytest.fixture(scope="module")
def tight(api_settings: Settings, server_thread: Any) -> Iterator[str]:
    """An app with small budgets."""
    settings = api_settings.model_copy(
        update={
            "key_prefix": f"t-{uuid.uuid4().hex[:12]}",
            "max_stored_models": 3,
            "max_labels": 8,
            "max_label_length": 16,
            "max_pending": 3,
            "max_answer_scores": 20,
        }
    )
    with server_thread(settings) as server:
        yield server.url


def test_quotas_and_answer_sizes_are_bounded(tight: str) -> None:
    with httpx.Client(base_url=tight, timeout=60) as c:
        r = create(c, "many", {**PETS, "labels": [f"l{i}" for i in range(9)]})
        assert r.status_code == 422 and field(r) == "body.labels" and "max_labels" in r.text
        r = create(c, "long", {**PETS, "labels": ["a", "b" * 17]})
        assert r.status_code == 422 and field(r) == "body.labels.1", r.text
        assert create(c, "p", PETS).status_code == 201
        items = [{"instance": VOTE}] * 7  # 7 x 3 scores > 20
        r = c.post("/v1/models/p/predict/batch", json={"items": items})
        assert r.status_code == 422 and "max_answer_scores" in r.text
        got = [c.post("/v1/models/p/predict", json={"instance": VOTE}) for _ in range(4)]
        assert [r.status_code for r in got] == [200, 200, 200, 429]
        assert got[3].json()["limit"] == "max_pending" and got[3].json()["max"] == 3
        assert got[3].headers["retry-after"]
        t = got[0].json()["trial_id"]
        assert c.post("/v1/models/p/label", json={"trial_id": t, "label": "cat"}).is_success
        assert c.post("/v1/models/p/predict", json={"instance": VOTE}).status_code == 200
        for name in ("q", "r"):
            assert create(c, name, PETS).status_code == 201
        r = create(c, "s", PETS)
        assert r.status_code == 429 and r.json()["limit"] == "max_stored_models"
        r = c.post("/v1/models/p/label", json={"trial_id": t, "label": "x" * 300})
        assert r.status_code == 422


# -- finding 5: no 500 from input --------------------------------------------------------


@pytest.mark.parametrize("call", ["predict", "learn", "learn/batch", "label/batch"])
def test_a_body_that_is_not_utf8_is_422(client: httpx.Client, model_name: str, call: str) -> None:
    assert create(client, model_name, PETS).status_code == 201
    raw = b'{"items": [{"instance": {}, "label": "\xff\xfe"}], "instance": "\xc3("}'
    r = client.post(
        f"/v1/models/{model_name}/{call}",
        content=raw,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422, r.text


def test_an_overflowing_state_shape_is_422(client: httpx.Client, model_name: str) -> None:
    spec = {"kind": "recycling", "size": 4, "learner": {"kind": "perceptron"}}
    body = {"labels": [1, -1], "input": {"attributes": {"n_features": 4}}, "learner": spec}
    assert create(client, model_name, body).is_success
    state = client.get(f"/v1/models/{model_name}/state").json()["state"]
    # the stored items' width is free: 4 x 2**62 values wrap to 0 in int64 arithmetic
    for shape in ([4, 2**62], [4, 2**70], [2**40, 2**40]):
        for name, doc in state["arrays"].items():
            if name.startswith("items_") and len(doc["shape"]) == 2:
                doc["shape"], doc["data"] = shape, ""
        r = client.put(f"/v1/models/{model_name}/state", json={"state": state})
        assert r.status_code == 422, r.text


def test_names_with_a_trailing_newline_are_refused_everywhere(
    api_url: str, client: httpx.Client, model_name: str
) -> None:
    assert create(client, model_name, PETS).status_code == 201
    for call in ("predict", "learn"):
        r = client.post(f"/v1/models/{model_name}%0A/{call}", json={"instance": VOTE})
        assert r.status_code == 422 and field(r) == "path.name", r.text
    r = client.post(f"/v1/models/{model_name}/predict", json={"instance": VOTE, "trial_id": "t\n"})
    assert r.status_code == 422
    url = api_url.replace("http://", "ws://") + f"/v1/models/{model_name}/stream"

    async def stream() -> dict[str, Any]:
        async with websockets.connect(url) as ws:
            msg = {"op": "predict", "id": 1, "instance": VOTE, "trial_id": "t\n"}
            await ws.send(orjson.dumps(msg).decode())
            return dict(orjson.loads(await ws.recv()))

    got = asyncio.run(stream())
    assert got["error"]["status"] == 422 and got["error"]["field"] == "trial_id", got


def test_unknown_names_leave_nothing_behind(api_settings: Settings, server_thread: Any) -> None:
    with server_thread(api_settings) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        service = server.server.config.app.state.service  # type: ignore[union-attr]
        for i in range(200):
            r = c.post(f"/v1/models/nobody-{i}/predict", json={"instance": VOTE})
            assert r.status_code == 404
        assert not service.replicas._loading and not any(
            n.startswith("nobody") for n in service.replicas._live
        )


# -- finding 7: trial ids nobody can guess -----------------------------------------------


def test_server_trial_ids_are_unguessable(client: httpx.Client, model_name: str) -> None:
    assert create(client, model_name, PETS).status_code == 201
    ids = [
        client.post(f"/v1/models/{model_name}/predict", json={"instance": VOTE}).json()["trial_id"]
        for _ in range(50)
    ]
    assert len(set(ids)) == 50 and all(len(t) >= 22 for t in ids)
    prefixes = {t[:6] for t in ids}  # a counter behind a fixed prefix would share it
    assert len(prefixes) == 50


# -- finding 8: writes can be retried ----------------------------------------------------


def test_learn_with_an_idempotency_key_is_applied_once(
    client: httpx.Client, model_name: str
) -> None:
    assert create(client, model_name, PETS).status_code == 201
    url = f"/v1/models/{model_name}/learn"
    key = {"Idempotency-Key": "k-1"}
    first = client.post(url, json={"instance": VOTE, "label": "bird"}, headers=key)
    again = client.post(url, json={"instance": VOTE, "label": "bird"}, headers=key)
    assert first.status_code == again.status_code == 200 and first.json() == again.json()
    other = client.post(url, json={"instance": VOTE, "label": "cat"}, headers=key)
    assert other.status_code == 409
    batch = {"items": [{"instance": VOTE, "label": "cat"}, {"instance": {}, "label": "nope"}]}
    b1 = client.post(f"{url}/batch", json=batch, headers={"Idempotency-Key": "k-2"})
    b2 = client.post(f"{url}/batch", json=batch, headers={"Idempotency-Key": "k-2"})
    assert b1.json() == b2.json() and b1.json()["items"][1]["error"]["status"] == 422
    assert client.get(f"/v1/models/{model_name}").json()["version"] == 2
    r = client.post(url, json={"instance": VOTE, "label": "cat"}, headers={"Idempotency-Key": ""})
    assert r.status_code == 422


def test_create_delete_and_import_retries_get_the_first_answer(
    client: httpx.Client, model_name: str
) -> None:
    key = {"Idempotency-Key": f"create-{model_name}"}
    first = create(client, model_name, PETS, **key)
    again = create(client, model_name, PETS, **key)
    assert first.status_code == again.status_code == 201 and first.json() == again.json()
    assert create(client, model_name, {**PETS, "label_ttl": 5}, **key).status_code == 409
    state = client.get(f"/v1/models/{model_name}/state").json()["state"]
    put = {"Idempotency-Key": "import-1"}
    s1 = client.put(f"/v1/models/{model_name}/state", json={"state": state}, headers=put)
    s2 = client.put(f"/v1/models/{model_name}/state", json={"state": state}, headers=put)
    assert s1.status_code == s2.status_code == 200
    assert s1.json()["model_version"] == s2.json()["model_version"] == 1
    gone = {"Idempotency-Key": "delete-1"}
    assert client.delete(f"/v1/models/{model_name}", headers=gone).status_code == 204
    assert client.delete(f"/v1/models/{model_name}", headers=gone).status_code == 204
    assert client.delete(f"/v1/models/{model_name}").status_code == 404


# -- finding 4 (stream): message size, connections, idle streams; finding 8 (stream) ---


@pytest.fixture(scope="module")
def small_streams(api_settings: Settings, server_thread: Any) -> Iterator[str]:
    settings = api_settings.model_copy(
        update={"ws_max_message_bytes": 2048, "ws_max_connections": 2, "ws_idle_timeout": 3.0}
    )
    with server_thread(settings) as server:
        yield server.url.replace("http://", "ws://")


async def _closed_with(ws: Any) -> tuple[int, str]:
    with pytest.raises(websockets.ConnectionClosed) as e:
        while True:
            await asyncio.wait_for(ws.recv(), 10)
    assert e.value.rcvd is not None
    return e.value.rcvd.code, e.value.rcvd.reason


def test_stream_limits_close_with_a_reason(
    small_streams: str, api_url: str, model_name: str
) -> None:
    with httpx.Client(base_url=api_url, timeout=60) as c:
        assert create(c, model_name, PETS).status_code == 201
    url = f"{small_streams}/v1/models/{model_name}/stream"

    async def run() -> None:
        async with websockets.connect(url) as ws:
            await ws.send(orjson.dumps({"op": "predict", "id": 1, "instance": VOTE}).decode())
            assert "result" in orjson.loads(await ws.recv())
            await ws.send("x" * 4096)
            code, reason = await _closed_with(ws)
            assert code == 1009 and "ws_max_message_bytes" in reason
        async with websockets.connect(url) as a, websockets.connect(url) as b:
            async with websockets.connect(url) as third:
                code, reason = await _closed_with(third)
                assert code == 1013 and "ws_max_connections" in reason
            for ws in (a, b):
                await ws.send(orjson.dumps({"op": "predict", "id": 2, "instance": VOTE}).decode())
                assert "result" in orjson.loads(await ws.recv())
        async with websockets.connect(url) as ws:
            code, reason = await _closed_with(ws)  # silent: closed after the idle timeout
            assert code == 1001 and "ws_idle_timeout" in reason

    asyncio.run(run())


def test_stream_learn_with_a_key_is_applied_once(
    api_url: str, client: httpx.Client, model_name: str
) -> None:
    assert create(client, model_name, PETS).status_code == 201
    url = api_url.replace("http://", "ws://") + f"/v1/models/{model_name}/stream"
    learn = {"op": "learn", "instance": VOTE, "label": "bird", "idempotency_key": "s-1"}

    async def run() -> list[dict[str, Any]]:
        async with websockets.connect(url) as ws:
            for i, msg in enumerate([learn, learn, {**learn, "label": "cat"}, learn]):
                await ws.send(orjson.dumps({**msg, "id": i}).decode())
            return [orjson.loads(await ws.recv()) for _ in range(4)]

    got = asyncio.run(run())
    assert got[0]["result"] == got[1]["result"] == got[3]["result"]
    assert got[2]["error"]["status"] == 409
    assert client.get(f"/v1/models/{model_name}").json()["version"] == 1


# -- defence in depth: an entry no worker can replay is quarantined -------------------


def test_a_corrupt_log_entry_is_quarantined_not_fatal(
    api_settings: Settings, client: httpx.Client, model_name: str
) -> None:
    assert create(client, model_name, PETS).status_code == 201
    url = f"/v1/models/{model_name}"
    assert client.post(f"{url}/learn", json={"instance": VOTE, "label": "cat"}).is_success
    keys = Keys(api_settings.key_prefix, model_name)
    assert api_settings.redis_url is not None
    r = sync_client(api_settings.redis_url)
    try:  # what no script writes: a label beyond the model's three
        r.xadd(keys.log, {"k": "n", "x": b"E", "y": "7"}, id="2-0")
        r.hset(keys.meta, "version", 2)
    finally:
        r.close()
    for _ in range(3):
        got = client.post(f"{url}/learn", json={"instance": VOTE, "label": "dog"})
        assert got.status_code == 200, got.text
    deadline = time.monotonic() + 10
    while (m := client.get(url).json())["folded"] < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert m["version"] == 5 and m["counters"]["quarantined"] == 1
    assert client.get(f"{url}/stats").json()["quarantined"] == 1


def test_a_busy_worker_sheds_load_with_503(api_settings: Settings, server_thread: Any) -> None:
    settings = api_settings.model_copy(update={"max_connections": 1})
    with (
        server_thread(settings) as server,
        socket.create_connection(("127.0.0.1", server.port)) as s,
    ):
        # a request whose body never comes holds the worker's only slot
        head = b"POST /v1/models HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 10\r\n"
        s.sendall(head + b"content-type: application/json\r\n\r\n")
        time.sleep(0.2)
        with httpx.Client(base_url=server.url, timeout=60) as c:
            r = c.get("/v1/models")
            assert r.status_code == 503 and "max_connections" in r.json()["detail"]
            assert r.headers["retry-after"] == "1"
            s.close()
            deadline = time.monotonic() + 10
            while c.get("/healthz").status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert c.get("/healthz").status_code == 200


# -- large learners are built, snapshotted and exported off the event loop ---------------


def test_the_loop_answers_while_a_large_learner_is_built_and_exported(
    client: httpx.Client, api_url: str, model_name: str
) -> None:
    body = {
        "labels": [1, -1],
        "input": {"attributes": {"n_features": 20_000}},
        "learner": {"kind": "vr-combine"},
        "max_active": 64,
    }
    waits: list[float] = []
    done = threading.Event()

    def poll() -> None:
        with httpx.Client(base_url=api_url, timeout=60) as c:
            while not done.is_set():
                t = time.monotonic()
                assert c.get("/healthz").status_code == 200
                waits.append(time.monotonic() - t)
                time.sleep(0.01)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        assert create(client, model_name, body).status_code == 201
        got = client.get(f"/v1/models/{model_name}/state")
        assert got.status_code == 200 and got.json()["model_version"] == 0
    finally:
        done.set()
        poller.join()
    assert len(waits) > 5 and max(waits) < 2.0, sorted(waits)[-5:]


# -- finding 6: a refused update is refused whole, and judged honestly -------------------


def test_a_refused_ensemble_trial_is_judged_by_what_it_predicted(
    client: httpx.Client, model_name: str
) -> None:
    member = {"kind": "balanced-winnow", "alpha": 1e150, "theta": 0.5}
    spec = {"kind": "bagging", "learner": member, "n_models": 3, "seed": 1}
    body = {"labels": [1, -1], "input": {"attributes": {"n_features": 6}}, "learner": spec}
    assert create(client, model_name, body).status_code == 201
    twin = build(spec, labels=[1, -1], size=6)
    rng = np.random.default_rng(0)
    refused = 0
    for _ in range(40):
        x = {str(i): 1.0 for i in np.flatnonzero(rng.random(6) < 0.5)}
        y = int(rng.choice([1, -1]))
        try:
            c, updated = twin.trial({int(i): v for i, v in x.items()}, y)
        except UpdateRefused as e:
            c, updated, refused = e.predicted, False, refused + 1
        got = client.post(
            f"/v1/models/{model_name}/learn", json={"instance": {"features": x}, "label": y}
        )
        assert got.status_code == 200, got.text
        want = {"predicted": twin.labels[c], "label": y, "mistake": twin.labels[c] != y}
        assert got.json() == {**want, "updated": updated}
    assert refused > 0
    deadline = time.monotonic() + 10
    while (m := client.get(f"/v1/models/{model_name}").json())["folded"] < 40:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert m["counters"]["refused"] == refused
    state = client.get(f"/v1/models/{model_name}/state").json()["state"]
    assert state["arrays"] == twin.export_state()["arrays"]


def test_a_model_body_that_is_not_utf8_is_422(client: httpx.Client) -> None:
    raw = b'{"name": "\xc3("}'  # not UTF-8: FastAPI cannot even decode it
    r = client.post("/v1/models", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422 and field(r) == "body", r.text


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity"])
def test_a_non_finite_number_in_a_routed_body_is_a_422(
    client: httpx.Client, model_name: str, number: bytes
) -> None:
    # Python's json module reads these; the 422 echoes the input, which must not fail it
    bodies = {
        "/v1/models": b'{"name":"%s","labels":[%s,1],"input":{"attributes":{"n_features":2}},'
        b'"learner":{"kind":"winnow"}}' % (model_name.encode(), number),
        "/v1/keys": b'{"scope":"read","limits":{"burst":%s}}' % number,
    }
    for path, body in bodies.items():
        r = client.post(path, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422, (path, r.text)
        assert r.json()["detail"][0]["loc"][0] == "body"
    assert client.get(f"/v1/models/{model_name}").status_code == 404


def test_each_label_of_a_batch_is_judged_as_alone(client: httpx.Client, model_name: str) -> None:
    """Labels of a batch looked up together: the known ones learned, each other one
    refused with the error it gets alone, naming its item."""
    assert create(client, model_name, PETS).status_code == 201
    labels: list[Any] = ["cat", "nope", 5, "0", "Cat", "bird"]
    items = [{"instance": VOTE, "label": y} for y in labels]
    r = client.post(f"/v1/models/{model_name}/learn/batch", json={"items": items})
    assert r.status_code == 200, r.text
    got = r.json()["items"]
    assert [g["error"] is None for g in got] == [True, False, False, False, False, True]
    for i, y in enumerate(labels):
        if got[i]["error"] is None:
            continue
        alone = client.post(f"/v1/models/{model_name}/learn", json={"instance": VOTE, "label": y})
        assert alone.status_code == 422
        assert got[i]["error"]["status"] == 422
        assert got[i]["error"]["field"] == f"items.{i}.label", got[i]
        assert got[i]["error"]["message"] in alone.text, (got[i], alone.text)
    stats = client.get(f"/v1/models/{model_name}").json()
    assert stats["version"] == 2
