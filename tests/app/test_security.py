"""Who may do what, over REST and the stream, on 4 workers of the real ``committee serve``.

Every route is tried with no key, a read key, a write key, an admin key, an admin key
confined to another tenant's models, and a revoked key; each answer is the one its scope
and tenancy call for, whichever worker takes the request.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _procs import Service
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

KINDS = ("none", "read", "write", "admin", "other", "revoked")
MODEL = {
    "labels": ["a", "b"],
    "input": {"attributes": {"n_features": 8}},
    "learner": {"kind": "winnow"},
}
X = {"features": [1, 0, 1, 0, 0, 0, 0, 1]}
PROPAGATION = 1.0  # seconds a key change may take to reach every worker


def _model(name: str) -> dict[str, Any]:
    return {"name": name, **MODEL}


def _wait(check: Any, what: str) -> None:
    deadline = time.monotonic() + PROPAGATION
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {PROPAGATION} s: {what}")
        time.sleep(0.05)


class Setup:
    def __init__(self, url: str) -> None:
        self.url = url
        self.keys: dict[str, str] = {}
        self.ids: dict[str, str] = {}

    def headers(self, kind: str) -> dict[str, str]:
        return {} if kind == "none" else {"Authorization": f"Bearer {self.keys[kind]}"}

    def call(self, kind: str, method: str, path: str, body: Any = None) -> httpx.Response:
        # a connection per request: the kernel spreads them over the workers
        with httpx.Client(base_url=self.url, timeout=30) as c:
            return c.request(method, path, json=body, headers=self.headers(kind))


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Setup]:
    prefix = f"sec-{time.monotonic_ns()}"
    log_dir: Path = tmp_path_factory.mktemp("security")
    with Service(log_dir, workers=4, redis_url=redis_url, prefix=prefix) as svc:
        s = Setup(svc.url)
        # while no key exists, the service is open: the first admin key turns auth on
        r = s.call("none", "POST", "/v1/keys", {"scope": "admin", "name": "root"})
        assert r.status_code == 201, r.text
        s.keys["admin"], s.ids["admin"] = r.json()["key"], r.json()["id"]
        for kind, body in {
            "read": {"scope": "read", "models": "acme-*"},
            "write": {"scope": "write", "models": "acme-*"},
            "other": {"scope": "admin", "models": "other-*", "name": "other tenant"},
            "revoked": {"scope": "write"},
        }.items():
            r = s.call("admin", "POST", "/v1/keys", body)
            assert r.status_code == 201, r.text
            s.keys[kind], s.ids[kind] = r.json()["key"], r.json()["id"]
        _wait(
            lambda: all(
                s.call("revoked", "GET", "/v1/models").status_code == 200 for _ in range(8)
            ),
            "a new key works everywhere",
        )
        assert s.call("admin", "DELETE", f"/v1/keys/{s.ids['revoked']}").status_code == 204
        _wait(
            lambda: all(
                s.call("revoked", "GET", "/v1/models").status_code == 401 for _ in range(8)
            ),
            "a revoked key fails everywhere",
        )
        for name in ("acme-1", "acme-del", "other-1"):
            assert s.call("admin", "POST", "/v1/models", _model(name)).status_code == 201
        yield s


def _expect(**codes: int) -> dict[str, int]:
    assert set(codes) == set(KINDS)
    return codes


OPEN = _expect(none=200, read=200, write=200, admin=200, other=200, revoked=200)
READ = _expect(none=401, read=200, write=200, admin=200, other=200, revoked=401)
READ_ACME = _expect(none=401, read=200, write=200, admin=200, other=404, revoked=401)
WRITE_ACME = _expect(none=401, read=403, write=200, admin=200, other=404, revoked=401)
ADMIN_ACME = _expect(none=401, read=403, write=403, admin=200, other=404, revoked=401)
ADMIN_ALL = _expect(none=401, read=403, write=403, admin=200, other=403, revoked=401)
# the scope is checked first: the admin's change reaches the model (a binary one, with no
# experts or named features, which refuses each)
CHANGE_ACME = {**ADMIN_ACME, "admin": 422}

ROUTES: list[tuple[str, str, Any, dict[str, int]]] = [
    ("GET", "/healthz", None, OPEN),
    ("GET", "/readyz", None, OPEN),
    ("GET", "/", None, OPEN),
    ("GET", "/openapi.json", None, OPEN),
    ("GET", "/metrics", None, READ),
    ("GET", "/v1/learners", None, READ),
    ("GET", "/v1/models", None, READ),
    ("GET", "/v1/models/acme-1", None, READ_ACME),
    ("GET", "/v1/models/acme-1/stats", None, READ_ACME),
    ("GET", "/v1/models/acme-1/state", None, ADMIN_ACME),
    ("POST", "/v1/models/acme-1/predict", {"instance": X, "track": False}, WRITE_ACME),
    ("POST", "/v1/models/acme-1/learn", {"instance": X, "label": "a"}, WRITE_ACME),
    ("POST", "/v1/models/acme-1/predict/batch", {"items": [{"instance": X}]}, WRITE_ACME),
    (
        "POST",
        "/v1/models/acme-1/learn/batch",
        {"items": [{"instance": X, "label": "b"}]},
        WRITE_ACME,
    ),
    (
        "POST",
        "/v1/models/acme-1/label/batch",
        {"items": [{"trial_id": "t", "label": "a"}]},
        WRITE_ACME,
    ),
    ("GET", "/v1/keys", None, ADMIN_ALL),
    ("GET", "/v1/audit", None, ADMIN_ALL),
    ("POST", "/v1/models/acme-1/experts", {"add": ["x"]}, CHANGE_ACME),
    ("POST", "/v1/models/acme-1/features", {"add": ["x"]}, CHANGE_ACME),
    ("POST", "/v1/models/acme-1/labels", {"add": ["c"]}, CHANGE_ACME),
    ("POST", "/v1/models/acme-1/rollback", {"version": 10**6}, CHANGE_ACME),
    ("GET", "/v1/models/acme-1/versions", None, READ_ACME),
    ("POST", "/v1/models/acme-1/backtest", {"learner": {"kind": "perceptron"}}, ADMIN_ACME),
    ("GET", "/v1/models/acme-1/backtest", None, READ_ACME),
]


@pytest.mark.parametrize(("method", "path", "body", "codes"), ROUTES, ids=lambda v: str(v)[:40])
def test_each_route_answers_each_key_as_its_scope_and_tenancy_say(
    service: Setup, method: str, path: str, body: Any, codes: dict[str, int]
) -> None:
    got = {kind: service.call(kind, method, path, body) for kind in KINDS}
    assert {k: r.status_code for k, r in got.items()} == codes, {
        k: r.text[:200] for k, r in got.items()
    }
    for kind, r in got.items():
        if r.status_code in (401, 403, 404):
            assert isinstance(r.json()["detail"], str)  # a JSON body that says why
        if r.status_code == 401:
            assert r.headers["www-authenticate"] == "Bearer"
        if kind == "other" and r.status_code == 404:  # the same answer as a missing model
            assert r.json() == {"detail": "model 'acme-1' does not exist"}


def test_labels_need_a_write_key_of_the_tenant(service: Setup) -> None:
    trials = {}
    for kind in KINDS:
        r = service.call("admin", "POST", "/v1/models/acme-1/predict", {"instance": X})
        trials[kind] = r.json()["trial_id"]
    got = {
        kind: service.call(
            kind, "POST", "/v1/models/acme-1/label", {"trial_id": trials[kind], "label": "b"}
        ).status_code
        for kind in KINDS
    }
    assert got == WRITE_ACME


def test_state_import_and_model_delete_are_admin_only(service: Setup) -> None:
    state = service.call("admin", "GET", "/v1/models/acme-1/state").json()["state"]
    got = {
        kind: service.call(kind, "PUT", "/v1/models/acme-1/state", {"state": state}).status_code
        for kind in KINDS
    }
    assert got == ADMIN_ACME
    # the admin goes last: before it, the model exists, so a 403 is not a missing model
    order = [k for k in KINDS if k != "admin"] + ["admin"]
    deleted = {k: service.call(k, "DELETE", "/v1/models/acme-del").status_code for k in order}
    assert deleted == {**ADMIN_ACME, "admin": 204}


def test_models_are_made_by_admins_within_their_tenancy(service: Setup) -> None:
    got = {
        kind: service.call(kind, "POST", "/v1/models", _model(f"acme-new-{kind}")).status_code
        for kind in KINDS
    }
    assert got == _expect(none=401, read=403, write=403, admin=201, other=403, revoked=401)
    assert service.call("other", "POST", "/v1/models", _model("other-2")).status_code == 201
    # each key lists only what it reaches
    names = {
        kind: {m["name"] for m in service.call(kind, "GET", "/v1/models").json()["models"]}
        for kind in ("read", "other", "admin")
    }
    assert names["other"] == {"other-1", "other-2"}
    assert "other-1" not in names["read"] and "acme-1" in names["read"]
    assert {"other-1", "acme-1"} <= names["admin"]
    metrics = service.call("other", "GET", "/metrics").text
    assert 'model="other-1"' in metrics and 'model="acme-1"' not in metrics


def test_keys_are_made_and_revoked_by_unconfined_admins_only(service: Setup) -> None:
    made = {
        kind: service.call(kind, "POST", "/v1/keys", {"scope": "read", "name": kind})
        for kind in KINDS
    }
    assert {k: r.status_code for k, r in made.items()} == {**ADMIN_ALL, "admin": 201}
    key_id = made["admin"].json()["id"]
    assert made["admin"].json()["key"].startswith("cmk_")
    listed = service.call("admin", "GET", "/v1/keys").json()["keys"]
    assert key_id in {k["id"] for k in listed}
    assert all("key" not in k and "digest" not in k for k in listed)  # no secret, no hash
    order = [k for k in KINDS if k != "admin"] + ["admin"]
    revoked = {k: service.call(k, "DELETE", f"/v1/keys/{key_id}").status_code for k in order}
    assert revoked == {**ADMIN_ALL, "admin": 204}
    assert service.call("admin", "DELETE", f"/v1/keys/{key_id}").status_code == 404


def _stream(service: Setup, kind: str, name: str) -> tuple[str, Any]:
    """("open", answer) after one predict over the stream, or ("closed", close code)."""
    url = service.url.replace("http://", "ws://") + f"/v1/models/{name}/stream"
    try:
        with connect(url, additional_headers=service.headers(kind), open_timeout=30) as ws:
            ws.send(json.dumps({"op": "predict", "id": 1, "instance": X, "track": False}))
            return "open", json.loads(ws.recv(timeout=30))
    except ConnectionClosed as e:
        assert e.rcvd is not None
        return "closed", e.rcvd.code


def test_the_stream_answers_each_key_as_its_scope_and_tenancy_say(service: Setup) -> None:
    got = {kind: _stream(service, kind, "acme-1") for kind in KINDS}
    closed = {k: v[1] for k, v in got.items() if v[0] == "closed"}
    assert closed == {"none": 4401, "read": 4403, "other": 4404, "revoked": 4401}
    for kind in ("write", "admin"):
        state, answer = got[kind]
        assert state == "open"
        assert answer["id"] == 1 and answer["result"]["label"] in ("a", "b"), answer


def test_a_change_over_the_stream_needs_an_admin_key_and_is_audited(service: Setup) -> None:
    url = service.url.replace("http://", "ws://") + "/v1/models/acme-1/stream"
    answers = {}
    for kind in ("write", "admin"):
        with connect(url, additional_headers=service.headers(kind), open_timeout=30) as ws:
            ws.send(json.dumps({"op": "labels", "id": kind, "add": ["c"]}))
            answers[kind] = json.loads(ws.recv(timeout=30))
    assert answers["write"]["error"]["status"] == 403, answers
    assert "admin key" in answers["write"]["error"]["message"]
    # past the scope: the binary model itself refuses a third label
    assert answers["admin"]["error"]["status"] == 422, answers
    assert answers["admin"]["error"]["field"] == "learner"
    entries = service.call("admin", "GET", "/v1/audit?limit=50").json()["entries"]
    actions = {(e["action"], e["status"]) for e in entries if e["model"] == "acme-1"}
    assert {("denied stream labels", 403), ("add labels", 422)} <= actions


def test_a_fork_over_the_stream_is_an_admins_and_is_audited(service: Setup) -> None:
    url = service.url.replace("http://", "ws://") + "/v1/models/acme-1/stream"
    answers = {}
    for kind in ("write", "admin"):
        with connect(url, additional_headers=service.headers(kind), open_timeout=30) as ws:
            ws.send(json.dumps({"op": "fork", "id": kind, "name": "acme-fork"}))
            answers[kind] = json.loads(ws.recv(timeout=30))
    assert answers["write"]["error"]["status"] == 403, answers
    assert answers["admin"]["result"]["name"] == "acme-fork", answers
    assert service.call("admin", "GET", "/v1/models/acme-fork").status_code == 200
    entries = service.call("admin", "GET", "/v1/audit?limit=50").json()["entries"]
    assert ("create model", "acme-fork", 200) in {
        (e["action"], e["model"], e["status"]) for e in entries
    }


def test_a_stream_stops_once_its_key_is_revoked(service: Setup) -> None:
    made = service.call("admin", "POST", "/v1/keys", {"scope": "write", "name": "short-lived"})
    key, key_id = made.json()["key"], made.json()["id"]
    _wait(
        lambda: all(
            httpx.get(
                f"{service.url}/v1/models", headers={"Authorization": f"Bearer {key}"}
            ).status_code
            == 200
            for _ in range(8)
        ),
        "a new key works everywhere",
    )
    url = service.url.replace("http://", "ws://") + "/v1/models/acme-1/stream"
    message = {"op": "predict", "instance": X, "track": False}
    with connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        ws.send(json.dumps({**message, "id": 0}))
        assert "result" in json.loads(ws.recv(timeout=30))
        assert service.call("admin", "DELETE", f"/v1/keys/{key_id}").status_code == 204
        deadline = time.monotonic() + PROPAGATION
        with pytest.raises(ConnectionClosed) as closed:
            for i in range(1, 10_000):
                ws.send(json.dumps({**message, "id": i}))
                ws.recv(timeout=30)
                assert time.monotonic() < deadline, "the stream still answers a revoked key"
                time.sleep(0.02)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401


def test_bodies_must_be_json_even_on_the_fast_path(service: Setup) -> None:
    for path in ("/v1/models/acme-1/learn", "/v1/models"):
        with httpx.Client(base_url=service.url, timeout=30) as c:
            r = c.post(
                path,
                content=json.dumps({"instance": X, "label": "a"}),
                headers={**service.headers("admin"), "content-type": "text/plain"},
            )
        assert r.status_code == 415, r.text
        assert "application/json" in r.json()["detail"]


def test_admin_actions_and_denied_requests_are_audited(service: Setup) -> None:
    assert service.call("none", "DELETE", "/v1/models/acme-1").status_code == 401
    assert service.call("write", "GET", "/v1/models/acme-1/state").status_code == 403
    assert service.call("admin", "POST", "/v1/models", _model("acme-audited")).status_code == 201
    entries = service.call("admin", "GET", "/v1/audit?limit=1000").json()["entries"]
    seen = {(e["action"], e["model"], e["status"], e["key_id"]) for e in entries}
    assert ("denied DELETE /v1/models/acme-1", "acme-1", 401, None) in seen
    assert ("denied GET /v1/models/acme-1/state", "acme-1", 403, service.ids["write"]) in seen
    assert ("create model", "acme-audited", 201, service.ids["admin"]) in seen
    assert ("create key", None, 201, service.ids["admin"]) in seen
    assert ("revoke key", None, 204, service.ids["admin"]) in seen
    assert [e["at"] for e in entries] == sorted((e["at"] for e in entries), reverse=True)


def test_a_job_is_read_within_its_models_tenancy_and_cancelled_by_its_admins(
    service: Setup,
) -> None:
    r = service.call("admin", "POST", "/v1/models/acme-1/backtest", {"learner": {"kind": "winnow"}})
    assert r.status_code == 200, r.text
    path = f"/v1/jobs/{r.json()['id']}"
    got = {kind: service.call(kind, "GET", path).status_code for kind in KINDS}
    assert got == READ_ACME
    cancelled = {kind: service.call(kind, "DELETE", path).status_code for kind in KINDS}
    assert cancelled == ADMIN_ACME  # (a job that ended stays as it ended)
    assert service.call("admin", "GET", path).json()["status"] == "done"
    audit = service.call("admin", "GET", "/v1/audit?limit=50").json()["entries"]
    actions = [(e["action"], e["model"], e["status"]) for e in audit]
    assert ("backtest", "acme-1", 200) in actions and ("cancel job", "acme-1", 200) in actions
