"""The security settings as an operator sets them: a bootstrap admin key, allowed hosts,
allowed origins for the stream, and CORS."""

from __future__ import annotations

import uuid

import httpx
import pytest
from _server import ServerThread
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from app.core.settings import Settings

MODEL = {
    "labels": ["a", "b"],
    "input": {"attributes": {"n_features": 2}},
    "learner": {"kind": "winnow"},
}


def _settings(redis_url: str, **kw: object) -> Settings:
    return Settings(redis_url=redis_url, key_prefix=f"s-{uuid.uuid4().hex[:12]}", **kw)


def test_the_bootstrap_admin_key_turns_auth_on_at_start(redis_url: str) -> None:
    secret = "bootstrap-" + uuid.uuid4().hex + uuid.uuid4().hex
    settings = _settings(redis_url, admin_key=secret)
    with ServerThread(settings) as server, httpx.Client(base_url=server.url) as c:
        assert c.get("/v1/models").status_code == 401
        c.headers["Authorization"] = f"Bearer {secret}"
        assert c.post("/v1/models", json={"name": "m", **MODEL}).status_code == 201
        [key] = c.get("/v1/keys").json()["keys"]
        assert (key["id"], key["scope"], key["models"]) == ("bootstrap", "admin", "*")


def test_a_short_bootstrap_key_is_refused() -> None:
    with pytest.raises(ValueError, match="admin_key"):
        Settings(admin_key="short")


def test_hosts_not_allowed_are_refused(redis_url: str) -> None:
    settings = _settings(redis_url, allowed_hosts=["committee.example"])
    with ServerThread(settings) as server, httpx.Client(base_url=server.url) as c:
        r = c.get("/v1/models")
        assert r.status_code == 400 and "allowed_hosts" in r.json()["detail"]
        ok = c.get("/v1/models", headers={"Host": "committee.example:8000"})
        assert ok.status_code == 200
        assert c.get("/healthz").status_code == 400  # before anything else


def test_origins_allowed_may_open_the_stream(redis_url: str) -> None:
    settings = _settings(redis_url, allowed_origins=["https://ops.example"])
    with ServerThread(settings) as server, httpx.Client(base_url=server.url) as c:
        assert c.post("/v1/models", json={"name": "m", **MODEL}).status_code == 201
        url = server.url.replace("http://", "ws://") + "/v1/models/m/stream"
        with connect(url, origin="https://ops.example"):  # type: ignore[arg-type]
            pass  # opened
        with pytest.raises(InvalidStatus) as refused:
            connect(url, origin="https://evil.example")  # type: ignore[arg-type]
        assert refused.value.response.status_code == 403


def test_cors_is_off_unless_origins_are_listed(redis_url: str) -> None:
    preflight = {
        "Origin": "https://app.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    with ServerThread(_settings(redis_url)) as server, httpx.Client(base_url=server.url) as c:
        r = c.options("/v1/models/m/predict", headers=preflight)
        assert "access-control-allow-origin" not in r.headers
    settings = _settings(redis_url, cors_origins=["https://app.example"])
    with ServerThread(settings) as server, httpx.Client(base_url=server.url) as c:
        r = c.options("/v1/models/m/predict", headers=preflight)
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "https://app.example"
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
