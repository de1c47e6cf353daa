"""Fan-out against real classifiers: MLServer serving three scikit-learn models over v2,
and a plain JSON server; the service calls them itself, within the model's deadline."""

from __future__ import annotations

import concurrent.futures
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from _server import ServerThread
from harness.mlserver import JsonServer, MLServer
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

            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                first = list(pool.map(predict, range(40)))
                own.kill()  # mid-load: the requests after it are answered all the same
                later = list(pool.map(predict, range(40, 80)))
            assert all(
                "slow" in r["abstained"] and "garbage" in r["abstained"] for r in first + later
            )
            assert any("lr" not in r["abstained"] for r in first)
            assert all("lr" in r["abstained"] for r in later[8:])
            for i, r in enumerate(first + later):  # no trial lost: each takes its label
                got = c.post(
                    f"/v1/models/{name}/label",
                    json={"trial_id": r["trial_id"], "label": LABELS[Y[i % 150]]},
                )
                assert got.status_code == 200, got.text
            stats = c.get(f"/v1/models/{name}/stats").json()
            assert stats["labelled"] == 80 and stats["pending"] == 0

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
