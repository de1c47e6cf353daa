"""Fan-out against real classifiers: MLServer serving three scikit-learn models over v2,
and a plain JSON server; the service calls them itself, within the model's deadline."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
import websockets
from _server import ServerThread
from harness.mlserver import JsonServer, MLServer, free_port
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression
from sklearn.naive_bayes import GaussianNB
from sklearn.tree import DecisionTreeClassifier

from app.core.settings import Settings

LABELS = ["setosa", "versicolor", "virginica"]
X, Y = load_iris(return_X_y=True)
ORDER = np.random.default_rng(7).permutation(len(X))
X, Y = X[ORDER], Y[ORDER]
LEARNER = {"kind": "committee", "alpha": 1.5}
SECRET = "Bearer s3cret"


@pytest.fixture(scope="module")
def classifiers() -> dict[str, Any]:
    """Three small classifiers, each fitted on part of the data (so that they differ)."""
    return {
        "lr": LogisticRegression(max_iter=500).fit(X[:40], Y[:40]),
        "tree": DecisionTreeClassifier(max_depth=2, random_state=0).fit(X[40:80], Y[40:80]),
        "nb": GaussianNB().fit(X[80:110], Y[80:110]),
    }


@pytest.fixture(scope="module")
def mlserver(
    tmp_path_factory: pytest.TempPathFactory, classifiers: dict[str, Any]
) -> Iterator[MLServer]:
    with MLServer(tmp_path_factory.mktemp("mlserver"), classifiers) as server:
        yield server


def _proba(model: Any) -> Any:
    return lambda row: model.predict_proba(np.asarray([row]))[0].tolist()


def _scores(model: Any) -> Any:
    return lambda row: dict(zip(LABELS, _proba(model)(row), strict=True))


@pytest.fixture(scope="module")
def json_server(classifiers: dict[str, Any]) -> Iterator[JsonServer]:
    scorers = {
        "nb": _scores(classifiers["nb"]),
        "slow": _scores(classifiers["lr"]),
        "garbage": _scores(classifiers["tree"]),
        "v2lr": _proba(classifiers["lr"]),
        "hop": _scores(classifiers["lr"]),
        "secret": _scores(classifiers["nb"]),
    }
    with JsonServer(scorers) as server:
        yield server


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[JsonServer]:
    """Another host (127.0.0.2), where a redirect points: it must never be called."""
    with JsonServer({"target": lambda row: dict.fromkeys(LABELS, 1.0)}, host="127.0.0.2") as s:
        yield s


def _settings(redis_url: str, **more: Any) -> Settings:
    return Settings(
        redis_url=redis_url,
        key_prefix=f"t-{uuid.uuid4().hex[:12]}",
        allowed_endpoints=["127.0.0.1:*"],
        endpoint_secrets={"js": {"Authorization": SECRET}},
        fanout_breaker_failures=2,
        fanout_breaker_cooldown_ms=300,
        **more,
    )


@pytest.fixture(scope="module")
def service(redis_url: str) -> Iterator[str]:
    with ServerThread(_settings(redis_url)) as server:
        yield server.url


@pytest.fixture
def api(service: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service, timeout=30) as c:
        yield c


def _name() -> str:
    return f"f-{uuid.uuid4().hex[:12]}"


def _model(c: httpx.Client, endpoints: dict[str, Any] | None, deadline_ms: int = 2000) -> str:
    name = _name()
    experts: dict[str, Any] = {"expert_names": ["lr", "tree", "nb"], "normalize": "raw"}
    if endpoints is not None:
        experts |= {"endpoints": endpoints, "deadline_ms": deadline_ms}
    body = {"name": name, "labels": LABELS, "input": {"experts": experts}, "learner": LEARNER}
    r = c.post("/v1/models", json=body)
    assert r.status_code == 201, r.text
    return name


def _v2(url: str, model: str, **more: Any) -> dict[str, Any]:
    return {
        "url": url,
        "protocol": "v2",
        "model": model,
        "output": "predict_proba",
        "classes": LABELS,
        **more,
    }


def _json(url: str, name: str, **more: Any) -> dict[str, Any]:
    return {"url": f"{url}/score/{name}", "protocol": "json", "output": "/scores", **more}


def test_the_fused_answer_is_the_fusion_of_the_classifiers_outputs(
    api: httpx.Client, mlserver: MLServer, json_server: JsonServer, classifiers: dict[str, Any]
) -> None:
    """Two v2 experts on MLServer and one json expert: the service's answer is what the
    same learner gives the classifiers' own outputs posted as votes, trial after trial."""
    fanned = _model(
        api,
        {
            "lr": _v2(mlserver.url, "lr"),
            "tree": _v2(mlserver.url, "tree"),
            "nb": _json(json_server.url, "nb"),
        },
    )
    posted = _model(api, None)
    for i in range(40):
        row = X[i].tolist()
        got = api.post(f"/v1/models/{fanned}/predict", json={"inputs": row, "trial_id": f"t{i}"})
        assert got.status_code == 200, got.text
        votes = {
            e: classifiers[e].predict_proba(X[i : i + 1])[0].tolist() for e in ("lr", "tree", "nb")
        }
        want = api.post(f"/v1/models/{posted}/predict", json={"instance": {"experts": votes}})
        assert got.json()["abstained"] == []
        assert got.json()["label"] == want.json()["label"]
        assert got.json()["scores"] == pytest.approx(want.json()["scores"], rel=1e-12, abs=1e-12)
        label = LABELS[Y[i]]
        a = api.post(f"/v1/models/{fanned}/label", json={"trial_id": f"t{i}", "label": label})
        b = api.post(
            f"/v1/models/{posted}/label", json={"trial_id": want.json()["trial_id"], "label": label}
        )
        assert a.status_code == 200 and a.json()["updated"] == b.json()["updated"]
    # the votes served are the ones kept: the two models learned alike
    wa = api.get(f"/v1/models/{fanned}/stats").json()
    wb = api.get(f"/v1/models/{posted}/stats").json()
    assert wa["mistakes"] == wb["mistakes"] and wa["updates"] == wb["updates"]


def test_posted_votes_and_fetched_ones_mix(
    api: httpx.Client, mlserver: MLServer, classifiers: dict[str, Any]
) -> None:
    """An expert whose vote is posted is not asked; the others are."""
    name = _model(api, {"lr": _v2(mlserver.url, "lr"), "tree": _v2(mlserver.url, "tree")})
    posted = _model(api, None)
    votes = {"lr": classifiers["lr"].predict_proba(X[:1])[0].tolist(), "tree": "virginica"}
    got = api.post(
        f"/v1/models/{name}/predict",
        json={"inputs": X[0].tolist(), "instance": {"experts": {"tree": "virginica"}}},
    ).json()
    want = api.post(f"/v1/models/{posted}/predict", json={"instance": {"experts": votes}}).json()
    assert got["abstained"] == ["nb"]  # no endpoint, no vote posted
    assert got["scores"] == pytest.approx(want["scores"], rel=1e-12, abs=1e-12)


def _metric(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_failing_classifiers_abstain_and_no_trial_is_lost(
    redis_url: str,
    tmp_path: Path,
    classifiers: dict[str, Any],
    json_server: JsonServer,
) -> None:
    """One classifier killed mid-load, one slow past the deadline, one answering garbage:
    each abstains, every request is answered and every trial takes its label; the
    garbage one's breaker opens, and closes once it answers well again."""
    json_server.mode |= {"slow": "slow", "garbage": "garbage"}
    json_server.slow_seconds = 1.0
    own = MLServer(tmp_path / "ml", {"lr": classifiers["lr"]}).start()
    try:
        with (
            ServerThread(_settings(redis_url)) as server,
            httpx.Client(base_url=server.url, timeout=30) as c,
        ):
            name = _name()
            experts = {
                "expert_names": ["lr", "slow", "garbage"],
                "normalize": "raw",
                "deadline_ms": 300,
                "endpoints": {
                    "lr": _v2(own.url, "lr"),
                    "slow": _json(json_server.url, "slow"),
                    "garbage": _json(json_server.url, "garbage"),
                },
            }
            body = {
                "name": name,
                "labels": LABELS,
                "input": {"experts": experts},
                "learner": LEARNER,
            }
            assert c.post("/v1/models", json=body).status_code == 201

            def predict(i: int) -> dict[str, Any]:
                r = c.post(
                    f"/v1/models/{name}/predict",
                    json={"inputs": X[i % 150].tolist(), "trial_id": f"t{i}"},
                )
                assert r.status_code == 200, r.text
                return r.json()

            # the live classifier answers within the deadline before the load starts (on a
            # loaded machine its first calls may not)
            alive = [predict(200)]
            while "lr" in alive[-1]["abstained"]:
                assert len(alive) < 100, alive[-1]
                alive.append(predict(200 + len(alive)))
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                first = list(pool.map(predict, range(40)))
                own.kill()  # mid-load: the requests after it are answered all the same
                later = list(pool.map(predict, range(40, 80)))
            assert all(
                "slow" in r["abstained"] and "garbage" in r["abstained"] for r in first + later
            )
            assert all("lr" in r["abstained"] for r in later[8:])
            answered = [*alive, *first, *later]
            for r in answered:  # no trial lost: each takes its label (trial i is t{i})
                i = int(r["trial_id"][1:])
                got = c.post(
                    f"/v1/models/{name}/label",
                    json={"trial_id": r["trial_id"], "label": LABELS[Y[i % 150]]},
                )
                assert got.status_code == 200, got.text
            stats = c.get(f"/v1/models/{name}/stats").json()
            assert stats["labelled"] == len(answered) and stats["pending"] == 0

            text = c.get("/metrics").text
            garbage = f"{json_server.url}/score/garbage"
            assert _metric(text, "committee_fanout_breaker", endpoint=garbage) == 2.0
            assert (
                _metric(text, "committee_fanout_breaker", endpoint=f"{own.url}/v2/models/lr/infer")
                == 2.0
            )
            assert (
                _metric(
                    text,
                    "committee_fanout_answers_total",
                    model=name,
                    expert="slow",
                    outcome="late",
                )
                or 0
            ) > 0
            assert (
                _metric(
                    text,
                    "committee_fanout_answers_total",
                    model=name,
                    expert="garbage",
                    outcome="open",
                )
                or 0
            ) > 0

            json_server.mode["garbage"] = "ok"  # healed: the probe after the cool-down closes it
            time.sleep(0.4)
            healed = predict(100)
            assert "garbage" not in healed["abstained"]
            text = c.get("/metrics").text
            assert _metric(text, "committee_fanout_breaker", endpoint=garbage) == 0.0
    finally:
        own.stop()
        json_server.mode |= {"slow": "ok", "garbage": "ok"}


def test_concurrent_predicts_go_to_an_endpoint_as_one_request_of_several_rows(
    redis_url: str, json_server: JsonServer, classifiers: dict[str, Any]
) -> None:
    """With one request in flight to an endpoint at most, the predicts arriving
    meanwhile are sent together, as rows of one v2 request; each gets its own row."""
    json_server.batches["v2lr"].clear()
    with (
        ServerThread(_settings(redis_url, fanout_concurrency=1)) as server,
        httpx.Client(base_url=server.url, timeout=30) as c,
    ):
        ep = {"url": json_server.url, "protocol": "v2", "model": "v2lr", "classes": LABELS}
        name = _model(c, {"lr": ep})
        posted = _model(c, None)

        def predict(i: int) -> tuple[int, dict[str, Any]]:
            r = c.post(f"/v1/models/{name}/predict", json={"inputs": X[i].tolist(), "track": False})
            assert r.status_code == 200, r.text
            return i, r.json()

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(predict, range(64)))
        for i, got in answers:
            assert got["abstained"] == ["tree", "nb"]
            vote = classifiers["lr"].predict_proba(X[i : i + 1])[0].tolist()
            want = c.post(
                f"/v1/models/{posted}/predict",
                json={"instance": {"experts": {"lr": vote}}, "track": False},
            ).json()
            assert got["scores"] == pytest.approx(want["scores"], rel=1e-12, abs=1e-12)
    batches = json_server.batches["v2lr"]
    assert sum(batches) == 64 and max(batches) > 1


def test_headers_come_from_named_secrets(api: httpx.Client, json_server: JsonServer) -> None:
    json_server.secret = SECRET
    try:
        with_secret = _model(api, {"nb": _json(json_server.url, "secret", headers_secret="js")})
        without = _model(api, {"nb": _json(json_server.url, "secret")})
        a = api.post(f"/v1/models/{with_secret}/predict", json={"inputs": X[0].tolist()}).json()
        b = api.post(
            f"/v1/models/{without}/predict",
            json={"inputs": X[0].tolist()},
            headers={"Authorization": SECRET},  # a request's headers are never passed on
        ).json()
        assert "nb" not in a["abstained"] and "nb" in b["abstained"]
    finally:
        json_server.secret = None


def test_an_answer_beyond_the_byte_bound_abstains(
    api: httpx.Client, json_server: JsonServer
) -> None:
    json_server.mode["hop"] = "huge"
    try:
        name = _model(api, {"nb": _json(json_server.url, "hop")})
        got = api.post(f"/v1/models/{name}/predict", json={"inputs": X[0].tolist()})
        assert got.status_code == 200 and "nb" in got.json()["abstained"]
    finally:
        json_server.mode["hop"] = "ok"


# -- server-side request forgery, and the config's checks -----------------------------


def _refused(c: httpx.Client, endpoints: Any, **experts: Any) -> dict[str, Any]:
    section = {"expert_names": ["lr", "tree", "nb"], "endpoints": endpoints, **experts}
    body = {"name": _name(), "labels": LABELS, "input": {"experts": section}, "learner": LEARNER}
    r = c.post("/v1/models", json=body)
    assert r.status_code == 422, r.text
    return r.json()


def _where(doc: dict[str, Any]) -> str:
    """The field a 422 names, as a dotted path."""
    return ".".join(str(part) for part in doc["detail"][0]["loc"][1:])


def test_an_endpoint_outside_the_allowed_hosts_is_refused(
    api: httpx.Client, client: httpx.Client, json_server: JsonServer
) -> None:
    doc = _refused(api, {"lr": _json("http://10.0.0.1:8080", "x")})
    assert _where(doc) == "input.experts.endpoints.lr.url", doc
    # no endpoint at all is allowed until an operator allows some (the session's service)
    doc = _refused(client, {"lr": _json(json_server.url, "nb")})
    assert _where(doc) == "input.experts.endpoints.lr.url"
    assert "not an allowed endpoint" in doc["detail"][0]["msg"]


def test_a_redirect_to_another_host_is_not_followed(
    api: httpx.Client, json_server: JsonServer, elsewhere: JsonServer
) -> None:
    json_server.mode["hop"] = "redirect"
    json_server.redirect_to = f"{elsewhere.url}/score/target"
    try:
        name = _model(api, {"nb": _json(json_server.url, "hop")})
        got = api.post(f"/v1/models/{name}/predict", json={"inputs": X[0].tolist()})
        assert got.status_code == 200 and "nb" in got.json()["abstained"]
        assert elsewhere.hits == 0
    finally:
        json_server.mode["hop"] = "ok"


@pytest.mark.parametrize(
    ("endpoint", "field"),
    [
        ({"url": "http://127.0.0.1:1", "protocol": "grpc"}, "input.experts.endpoints.lr.protocol"),
        ({"url": "http://127.0.0.1:1", "protocol": "v2"}, "input.experts.endpoints.lr.model"),
        ({"url": "ftp://127.0.0.1:1/x", "protocol": "json"}, "input.experts.endpoints.lr.url"),
        ({"url": "http://u:p@127.0.0.1:1/x", "protocol": "json"}, "input.experts.endpoints.lr.url"),
        (
            {"url": "http://127.0.0.1:1/x", "protocol": "json", "verb": "GET"},
            "input.experts.endpoints.lr.verb",
        ),
        (
            {"url": "http://127.0.0.1:1/x", "protocol": "json", "headers_secret": "nope"},
            "input.experts.endpoints.lr.headers_secret",
        ),
        (
            {"url": "http://127.0.0.1:1/x", "protocol": "json", "timeout_ms": 0},
            "input.experts.endpoints.lr.timeout_ms",
        ),
        (
            {"url": "http://127.0.0.1:1/x", "protocol": "json", "output": "scores"},
            "input.experts.endpoints.lr.output",
        ),
        (
            {"url": "http://127.0.0.1:1", "model": "m", "classes": ["setosa", "rose"]},
            "input.experts.endpoints.lr.classes.1",
        ),
        ({"url": "http://127.0.0.1:1", "model": "../m"}, "input.experts.endpoints.lr.model"),
    ],
)
def test_endpoint_configs_are_checked_member_by_member(
    api: httpx.Client, endpoint: dict[str, Any], field: str
) -> None:
    doc = _refused(api, {"lr": endpoint})
    assert _where(doc) == field, doc


def test_deadline_and_expert_names_are_checked(api: httpx.Client) -> None:
    ep = {"url": "http://127.0.0.1:1/x", "protocol": "json"}
    assert _where(_refused(api, {"lr": ep}, deadline_ms=10**6)) == "input.experts.deadline_ms"
    assert _where(_refused(api, {"vit": ep})) == "input.experts.endpoints.vit"
    assert _where(_refused(api, ["lr"])) == "input.experts.endpoints"


def test_inputs_need_an_endpoint_and_a_row_for_v2(api: httpx.Client, mlserver: MLServer) -> None:
    plain = _model(api, None)
    r = api.post(f"/v1/models/{plain}/predict", json={"inputs": [1, 2, 3, 4]})
    assert r.status_code == 422 and "inputs" in r.text
    name = _model(api, {"lr": _v2(mlserver.url, "lr")})
    r = api.post(f"/v1/models/{name}/predict", json={"inputs": {"image": "..."}})
    assert r.status_code == 422 and "inputs" in r.text


# -- batch and stream predicts with inputs ----------------------------------------------


def _three(mlserver: MLServer, json_server: JsonServer) -> dict[str, Any]:
    return {
        "lr": _v2(mlserver.url, "lr"),
        "tree": _v2(mlserver.url, "tree"),
        "nb": _json(json_server.url, "nb"),
    }


def test_a_batch_with_inputs_answers_as_single_predicts_do(
    api: httpx.Client, mlserver: MLServer, json_server: JsonServer, classifiers: dict[str, Any]
) -> None:
    """Each item of a batch asks the endpoints with its own inputs: its answer is the
    single predict's on the same inputs; an item may post votes too, or only votes;
    inputs a v2 endpoint cannot take are that item's error, the others are answered;
    the trials are kept and take their labels."""
    name = _model(api, _three(mlserver, json_server))
    items: list[dict[str, Any]] = [
        {"inputs": X[i].tolist(), "trial_id": f"b{i}"} for i in range(24)
    ]
    items[5]["instance"] = {"experts": {"nb": "virginica"}}  # posted: nb not asked
    lr0 = classifiers["lr"].predict_proba(X[:1])[0].tolist()
    items.append({"instance": {"experts": {"lr": lr0}}, "trial_id": "plain"})  # no inputs
    items.append({"inputs": {"image": "..."}, "trial_id": "bad"})
    r = api.post(f"/v1/models/{name}/predict/batch", json={"items": items})
    assert r.status_code == 200, r.text
    got = r.json()["items"]
    assert len(got) == len(items)
    assert (
        got[-1]["result"] is None and got[-1]["error"]["field"] == f"items.{len(items) - 1}.inputs"
    )
    for i, item in enumerate(items[:-1]):
        one = {k: v for k, v in item.items() if k != "trial_id"} | {"track": False}
        want = api.post(f"/v1/models/{name}/predict", json=one)
        assert want.status_code == 200, want.text
        res = got[i]["result"]
        assert got[i]["error"] is None and res["trial_id"] == item["trial_id"]
        assert res["label"] == want.json()["label"]
        assert res["scores"] == pytest.approx(want.json()["scores"], rel=1e-12, abs=1e-12)
        assert res.get("abstained") == want.json().get("abstained")
    assert got[0]["result"]["abstained"] == [] and "abstained" not in got[-2]["result"]
    for i in range(24):
        label = {"trial_id": f"b{i}", "label": LABELS[Y[i]]}
        assert api.post(f"/v1/models/{name}/label", json=label).status_code == 200
    assert api.get(f"/v1/models/{name}/stats").json()["labelled"] == 24


def test_a_batchs_rows_go_to_a_v2_endpoint_together(
    redis_url: str, json_server: JsonServer, classifiers: dict[str, Any]
) -> None:
    """The items' calls to one v2 endpoint are concurrent: gathered as rows of a
    request (one at a time in flight here), each item given its own row's vote."""
    json_server.batches["v2lr"].clear()
    with (
        ServerThread(_settings(redis_url, fanout_concurrency=1)) as server,
        httpx.Client(base_url=server.url, timeout=30) as c,
    ):
        ep = {"url": json_server.url, "protocol": "v2", "model": "v2lr", "classes": LABELS}
        name = _model(c, {"lr": ep})
        items = [{"inputs": X[i].tolist()} for i in range(40)]
        r = c.post(f"/v1/models/{name}/predict/batch", json={"items": items, "track": False})
        assert r.status_code == 200, r.text
        for i, item in enumerate(r.json()["items"]):
            vote = classifiers["lr"].predict_proba(X[i : i + 1])[0].tolist()
            want = c.post(
                f"/v1/models/{name}/predict",
                json={"instance": {"experts": {"lr": vote}}, "track": False},
            ).json()
            assert item["result"]["scores"] == pytest.approx(want["scores"], rel=1e-12)
    batches = json_server.batches["v2lr"]
    assert sum(batches) == 40 and len(batches) <= 2, batches


def test_a_dead_endpoint_abstains_item_by_item(
    api: httpx.Client, mlserver: MLServer, json_server: JsonServer
) -> None:
    """An endpoint where nothing listens: every item of the batch is answered, each
    naming it among the experts that abstained, the others' votes used."""
    dead = f"http://127.0.0.1:{free_port()}"
    name = _model(
        api,
        {"lr": _v2(mlserver.url, "lr"), "tree": _v2(dead, "tree"), "nb": _json(dead, "nb")},
    )
    items = [{"inputs": X[i].tolist()} for i in range(12)]
    r = api.post(f"/v1/models/{name}/predict/batch", json={"items": items})
    assert r.status_code == 200, r.text
    for item in r.json()["items"]:
        assert item["error"] is None and item["result"]["abstained"] == ["tree", "nb"]


def test_the_stream_predicts_with_inputs(
    service: str, api: httpx.Client, mlserver: MLServer, json_server: JsonServer
) -> None:
    """Over the WebSocket stream a predict may carry inputs, alone or among plain
    predicts and labels: answered as the REST predict is, errors per message."""
    name = _model(api, _three(mlserver, json_server))
    plain = _model(api, None)
    messages: list[dict[str, Any]] = [
        {"op": "predict", "id": i, "inputs": X[i].tolist(), "trial_id": f"s{i}"} for i in range(6)
    ]
    messages.insert(2, {"op": "predict", "id": "plain", "instance": {"experts": {"lr": "setosa"}}})
    messages.append({"op": "predict", "id": "bad", "inputs": "not a row"})
    messages.append({"op": "predict", "id": "none"})
    messages.append({"op": "label", "id": "l0", "trial_id": "s0", "label": LABELS[Y[0]]})

    async def exchange(url: str) -> list[dict[str, Any]]:
        async with websockets.connect(url) as ws:
            for m in messages:
                await ws.send(orjson.dumps(m).decode())
            return [orjson.loads(await ws.recv()) for _ in messages]

    url = service.replace("http://", "ws://")
    got = {a["id"]: a for a in asyncio.run(exchange(f"{url}/v1/models/{name}/stream"))}
    for i in range(6):
        want = api.post(
            f"/v1/models/{name}/predict", json={"inputs": X[i].tolist(), "track": False}
        )
        res = got[i]["result"]
        assert res["trial_id"] == f"s{i}" and res["abstained"] == []
        assert res["label"] == want.json()["label"]
        assert res["scores"] == pytest.approx(want.json()["scores"], rel=1e-12, abs=1e-12)
    assert "abstained" not in got["plain"]["result"] or got["plain"]["result"]["abstained"] is None
    assert got["bad"]["error"]["field"] == "inputs"
    assert got["none"]["error"]["field"] == "instance"
    assert got["l0"]["result"]["label"] == LABELS[Y[0]]
    # a model without endpoints: inputs are refused, message by message
    lone = asyncio.run(
        _one_message(f"{url}/v1/models/{plain}/stream", {"op": "predict", "id": 1, "inputs": [1]})
    )
    assert lone["error"]["field"] == "inputs"


async def _one_message(url: str, message: dict[str, Any]) -> dict[str, Any]:
    async with websockets.connect(url) as ws:
        await ws.send(orjson.dumps(message).decode())
        got: dict[str, Any] = orjson.loads(await ws.recv())
        return got


def test_experts_added_live_bring_their_endpoints(
    api: httpx.Client, json_server: JsonServer
) -> None:
    name = _model(api, {"nb": _json(json_server.url, "nb")})
    url = f"/v1/models/{name}/experts"
    added = api.post(
        url, json={"add": ["lr2"], "endpoints": {"lr2": _json(json_server.url, "hop")}}
    )
    assert added.status_code == 200, added.text
    endpoints = added.json()["input"]["experts"]["endpoints"]
    assert set(endpoints) == {"nb", "lr2"} and endpoints["lr2"]["url"].endswith("/score/hop")
    # the new expert is asked from the next predict on, beside the one there from the start
    got = api.post(f"/v1/models/{name}/predict", json={"inputs": X[0].tolist()})
    assert got.status_code == 200, got.text
    assert got.json()["abstained"] == ["lr", "tree"]
    # refused, naming the member, and nothing changed: a host that is not allowed, an
    # endpoint for an expert this change does not add
    far = {"add": ["x1"], "endpoints": {"x1": _json("http://10.0.0.1:8080", "x")}}
    refused = api.post(url, json=far)
    assert refused.status_code == 422 and _where(refused.json()) == "endpoints.x1.url"
    other = api.post(url, json={"add": ["x2"], "endpoints": {"nb": _json(json_server.url, "nb")}})
    assert other.status_code == 422 and "endpoints.nb" in other.text, other.text
    names = api.get(f"/v1/models/{name}").json()["input"]["experts"]["expert_names"]
    assert names == ["lr", "tree", "nb", "lr2"]
