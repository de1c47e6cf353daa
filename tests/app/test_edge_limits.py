"""What a request's envelope may be, over HTTP against the real app: a body encoding the
service does not decode (415), headers beyond their bounds (431) and a body nested beyond
its depth (422): each refused with the header or limit named, never read as something
else."""

from __future__ import annotations

import gzip
import uuid
from typing import Any

import httpx
import orjson
import pytest

from app.core.settings import Settings
from app.http.limits import json_depth

MODEL = {
    "labels": [1, -1],
    "input": {"attributes": {"n_features": 2}},
    "learner": {"kind": "winnow"},
}
LEARN = {"instance": {"features": [1, 0]}, "label": 1}
JSON = {"content-type": "application/json"}
DEFAULTS = Settings(redis_url="redis://unused")


@pytest.fixture
def model(client: httpx.Client, model_name: str) -> str:
    r = client.post("/v1/models", json={"name": model_name, **MODEL})
    assert r.status_code == 201, r.text
    return model_name


@pytest.mark.parametrize("encoding", ["gzip", "br", "deflate, gzip"])
@pytest.mark.parametrize("call", ["learn", "learn/batch", "create"])
def test_an_encoded_body_is_415_naming_the_header(
    client: httpx.Client, model: str, call: str, encoding: str
) -> None:
    doc: Any = {"items": [LEARN]} if call == "learn/batch" else LEARN
    path = f"/v1/models/{model}/{call}"
    if call == "create":
        doc, path = {"name": f"{model}-2", **MODEL}, "/v1/models"
    for raw in (orjson.dumps(doc), gzip.compress(orjson.dumps(doc))):
        r = client.post(path, content=raw, headers={**JSON, "content-encoding": encoding})
        assert r.status_code == 415, r.text
        assert "Content-Encoding" in r.json()["detail"]
    assert client.get(f"/v1/models/{model}/stats").json()["learned"] == 0
    r = client.post(path, json=doc, headers={"content-encoding": "identity"})
    assert r.status_code in (200, 201), r.text


def test_too_many_headers_are_431_naming_the_limit(client: httpx.Client) -> None:
    most = DEFAULTS.max_headers
    extra = {f"x-extra-{i}": "1" for i in range(most)}
    r = client.get("/v1/models", headers=extra)
    assert r.status_code == 431, r.text
    assert "max_headers" in r.json()["detail"] and str(most) in r.json()["detail"]
    fewer = {f"x-extra-{i}": "1" for i in range(most // 2)}
    assert client.get("/v1/models", headers=fewer).status_code == 200


def test_headers_beyond_their_bytes_are_431_naming_the_limit(
    client: httpx.Client, model: str
) -> None:
    most = DEFAULTS.max_header_bytes
    for headers in ({"x-big": "v" * most}, {f"x-h{i}": "v" * (most // 8) for i in range(9)}):
        for method, path, body in (
            ("GET", "/v1/models", None),
            ("POST", f"/v1/models/{model}/learn", LEARN),
        ):
            r = client.request(method, path, json=body, headers=headers)
            assert r.status_code == 431, r.text
            assert "max_header_bytes" in r.json()["detail"], r.text
    assert client.get("/v1/models", headers={"x-big": "v" * (most // 2)}).status_code == 200


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize("depth", [300, 5_000, 100_000])
def test_a_body_nested_too_deep_is_422_naming_its_depth_and_limit(
    client: httpx.Client, model: str, depth: int
) -> None:
    most = DEFAULTS.max_json_depth
    for path, raw, nests, member in (
        ("/v1/models", b'{"name": "x", "labels": ' + _nested(depth) + b"}", depth + 1, "labels"),
        (
            f"/v1/models/{model}/learn",
            b'{"label": 1, "instance": ' + _nested(depth) + b"}",
            depth + 1,
            "instance",
        ),
        (
            f"/v1/models/{model}/learn/batch",
            b'{"items": ' + _nested(depth) + b"}",
            depth + 1,
            "items",
        ),
        (
            f"/v1/models/{model}/state",
            b'{"state": {"a": ' + _nested(depth) + b"}}",
            depth + 2,
            "state",
        ),
    ):
        method = "PUT" if path.endswith("state") else "POST"
        r = client.request(method, path, content=raw, headers=JSON)
        assert r.status_code == 422, (path, r.text)
        [error] = r.json()["detail"]
        assert "UTF-8" not in error["msg"], (path, error)
        assert f"nests {nests} deep" in error["msg"] and f"at most {most}" in error["msg"], error
        assert "max_json_depth" in error["msg"] and error["loc"] == ["body", member], error


def test_a_body_within_the_depth_is_read(client: httpx.Client, model: str) -> None:
    state = client.get(f"/v1/models/{model}/state").json()["state"]
    assert json_depth(orjson.dumps({"state": state})) <= DEFAULTS.max_json_depth
    assert client.put(f"/v1/models/{model}/state", json={"state": state}).status_code == 200


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        (b"", 0),
        (b'"[[["', 0),
        (b"{}", 1),
        (b'[1, "\\"[", [2, {"a": []}]]', 4),
        (b'["\\\\", [[]]]', 3),
        (b'{"a]": {"b}": "\\\\\\"[[["}}', 2),
    ],
)
def test_json_depth_counts_brackets_outside_strings(text: bytes, depth: int) -> None:
    assert json_depth(text) == depth


def test_headers_are_bounded_before_the_key_is_read(
    api_settings: Settings, server_thread: Any
) -> None:
    """Auth on: a request without a key and with too many header fields is a 431, not a
    401 (the guard never reads what is beyond the bounds); within them it is the 401."""
    # keys of a prefix of its own: auth goes on for this prefix only
    settings = api_settings.model_copy(update={"key_prefix": f"t-{uuid.uuid4().hex[:12]}"})
    with server_thread(settings) as server, httpx.Client(base_url=server.url) as c:
        made = c.post("/v1/keys", json={"scope": "admin", "models": "*"})
        assert made.status_code == 201, made.text
        extra = {f"x-extra-{i}": "1" for i in range(settings.max_headers)}
        r = c.get("/v1/models", headers=extra)
        assert r.status_code == 431 and "max_headers" in r.json()["detail"], r.text
        assert c.get("/v1/models").status_code == 401
