"""The OpenAPI document and the validator agree, over HTTP against the real app: what the
document calls an integer (2.0 included) is taken as one, its integer bounds are the exact
integers, its patterns refuse what the service refuses, a boolean is never a number, and
each answer the service gives is listed."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.core.settings import Settings

MODEL = {
    "labels": [1, 2],
    "input": {"attributes": {"n_features": 2}},
    "learner": {"kind": "winnow"},
}
X = {"features": [1, 0]}


def test_an_integral_float_is_an_integer_label(client: httpx.Client, model_name: str) -> None:
    r = client.post("/v1/models", json={**MODEL, "name": model_name, "labels": [1.0, 2]})
    assert r.status_code == 201, r.text
    assert r.json()["labels"] == [1, 2]
    m = f"/v1/models/{model_name}"
    r = client.post(f"{m}/learn", json={"instance": X, "label": 2.0})
    assert r.status_code == 200 and r.json()["label"] == 2, r.text
    r = client.post(f"{m}/learn/batch", json={"items": [{"instance": X, "label": 1.0}] * 3})
    assert r.status_code == 200, r.text
    assert [i["result"]["label"] for i in r.json()["items"]] == [1, 1, 1]
    trial = client.post(f"{m}/predict", json={"instance": X}).json()["trial_id"]
    r = client.post(f"{m}/label", json={"trial_id": trial, "label": -0.0 + 2})
    assert r.status_code == 200 and r.json()["label"] == 2, r.text
    for label in (2.5, True, 1e300, -(2**63) - 1, 2**63, [2]):
        r = client.post(f"{m}/learn", json={"instance": X, "label": label})
        assert r.status_code == 422, (label, r.text)


def _document(client: httpx.Client) -> tuple[str, dict[str, Any]]:
    r = client.get("/openapi.json")
    assert r.status_code == 200
    return r.text, r.json()


def test_integer_bounds_are_written_as_exact_integers(client: httpx.Client) -> None:
    text, doc = _document(client)
    assert "e+18" not in text and "9223372036854775808" in text
    label = doc["components"]["schemas"]["LabelCreate"]["properties"]["label"]["anyOf"][1]
    assert label["exclusiveMaximum"] == 2**63 and type(label["exclusiveMaximum"]) is int
    assert label["minimum"] == -(2**63) and type(label["minimum"]) is int


def test_the_audit_cursor_pattern_refuses_what_the_service_refuses(client: httpx.Client) -> None:
    _, doc = _document(client)
    [before] = [p for p in doc["paths"]["/v1/audit"]["get"]["parameters"] if p["name"] == "before"]
    pattern = re.compile(before["schema"]["anyOf"][0]["pattern"])
    for cursor in ("0-1", "1700000000000-0", f"{2**64 - 1}-{2**64 - 1}"):
        assert pattern.search(cursor), cursor
        assert client.get("/v1/audit", params={"before": cursor}).status_code == 200
    for cursor in (f"{2**64}-0", f"0-{2**64}", "99999999999999999999-1"):
        assert not pattern.search(cursor), cursor
        assert client.get("/v1/audit", params={"before": cursor}).status_code == 422


@pytest.fixture
def keys_api(api_settings: Settings, server_thread: Any) -> Iterator[httpx.Client]:
    """An app of its own (making keys turns auth on), with an admin key."""
    settings = api_settings.model_copy(update={"key_prefix": f"t-{uuid.uuid4().hex[:12]}"})
    with server_thread(settings) as server, httpx.Client(base_url=server.url, timeout=30) as c:
        r = c.post("/v1/keys", json={"scope": "admin", "name": "root"})
        assert r.status_code == 201, r.text
        c.headers["Authorization"] = f"Bearer {r.json()['key']}"
        yield c


@pytest.mark.parametrize(
    "limits",
    [
        {"trials_per_second": True},
        {"requests_per_second": False},
        {"burst": True},
        {"max_models": True},
        {"max_models": "5"},
        {"trials_per_second": "5"},
    ],
)
def test_a_key_limit_is_a_number_never_a_boolean_or_a_string(
    keys_api: httpx.Client, limits: dict[str, Any]
) -> None:
    r = keys_api.post("/v1/keys", json={"scope": "write", "limits": limits})
    assert r.status_code == 422, r.text
    [field] = limits
    assert any(e["loc"][:3] == ["body", "limits", field] for e in r.json()["detail"]), r.text
    assert len(keys_api.get("/v1/keys").json()["keys"]) == 1


def test_a_key_limit_takes_json_numbers(keys_api: httpx.Client) -> None:
    limits = {"trials_per_second": 5, "requests_per_second": 2.5, "max_models": 3.0}
    r = keys_api.post("/v1/keys", json={"scope": "write", "limits": limits})
    assert r.status_code == 201, r.text
    assert r.json()["limits"] == {
        "trials_per_second": 5,
        "requests_per_second": 2.5,
        "max_models": 3,
    }


def test_every_refusal_of_a_request_is_listed(client: httpx.Client) -> None:
    _, doc = _document(client)
    for path, item in doc["paths"].items():
        for method, op in item.items():
            codes = set(op["responses"])
            assert "431" in codes, (method, path)  # headers beyond their bounds
            if "requestBody" in op:
                assert {"413", "415", "422"} <= codes, (method, path)
    assert "409" in doc["paths"]["/v1/keys/{key_id}"]["delete"]["responses"]
