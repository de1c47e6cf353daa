"""The dashboard shows a fan-out model's endpoints: each one's circuit breaker and the
outcomes of its latest answers, as ``GET /v1/models/{name}/endpoints`` gives them, in a
real headless Chromium."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from _browser import chromium, wait_for
from _server import ServerThread
from harness.mlserver import JsonServer

from app.core.settings import Settings

LABELS = ["cat", "dog"]
LEARNER = {"kind": "committee"}

_READ_ENDPOINTS = """
const card = document.querySelector(`article.card[data-model="${arguments[0]}"]`);
const panel = card && card.querySelector('[data-panel="endpoints"]');
if (!panel || panel.hidden) return null;
return {
  deadline: panel.querySelector('[data-field="deadline_ms"]').textContent,
  rows: [...panel.querySelectorAll("tbody tr")].map((tr) => ({
    expert: tr.dataset.expert,
    breaker: tr.dataset.breaker,
    shown: tr.querySelector('[data-field="breaker"]').textContent,
    failures: tr.querySelector('[data-field="failures"]').textContent,
    recent: JSON.parse(tr.querySelector('[data-field="recent"]').dataset.counts),
    text: tr.querySelector('[data-field="recent"]').textContent,
  })),
};
"""


@pytest.fixture(scope="module")
def classifiers() -> Iterator[JsonServer]:
    score = {"good": lambda row: {"cat": 0.8, "dog": 0.2}, "bad": lambda row: {"cat": 1.0}}
    with JsonServer(score) as server:
        server.mode["bad"] = "fail"
        yield server


@pytest.fixture(scope="module")
def service(redis_url: str) -> Iterator[str]:
    settings = Settings(
        redis_url=redis_url,
        key_prefix=f"t-{uuid.uuid4().hex[:12]}",
        allowed_endpoints=["127.0.0.1:*"],
        fanout_breaker_failures=3,
        fanout_breaker_cooldown_ms=600_000,  # stays open while the page is read
    )
    with ServerThread(settings) as server:
        yield server.url


def _model(c: httpx.Client, url: str) -> str:
    name = f"d-{uuid.uuid4().hex[:12]}"
    endpoints = {
        e: {"url": f"{url}/score/{e}", "protocol": "json", "output": "/scores"}
        for e in ("good", "bad")
    }
    experts = {"expert_names": ["good", "bad", "posted"], "endpoints": endpoints}
    body = {"name": name, "labels": LABELS, "input": {"experts": experts}, "learner": LEARNER}
    r = c.post("/v1/models", json=body)
    assert r.status_code == 201, r.text
    return name


def test_the_endpoints_route_and_the_dashboard_show_breakers(
    service: str, classifiers: JsonServer
) -> None:
    with httpx.Client(base_url=service, timeout=30) as c:
        name = _model(c, classifiers.url)
        plain = f"p-{uuid.uuid4().hex[:12]}"
        body = {
            "name": plain,
            "labels": LABELS,
            "input": {"experts": {"expert_names": ["a"]}},
            "learner": LEARNER,
        }
        assert c.post("/v1/models", json=body).status_code == 201
        for _ in range(5):
            r = c.post(f"/v1/models/{name}/predict", json={"inputs": {"x": 1}, "track": False})
            assert r.status_code == 200 and r.json()["abstained"] == ["bad", "posted"], r.text
        doc: dict[str, Any] = c.get(f"/v1/models/{name}/endpoints").json()
        assert doc["deadline_ms"] == 200
        by = {e["expert"]: e for e in doc["endpoints"]}
        assert set(by) == {"good", "bad"}  # "posted" has no endpoint
        assert by["good"]["breaker"] == "closed" and by["good"]["recent"] == {"ok": 5}
        assert by["bad"]["breaker"] == "open" and by["bad"]["failures"] == 3
        assert by["bad"]["recent"] == {"error": 3, "open": 2}
        assert by["bad"]["url"] == f"{classifiers.url}/score/bad"
        assert c.get(f"/v1/models/{plain}/endpoints").json() == {
            "deadline_ms": None,
            "endpoints": [],
        }
        assert c.get("/v1/models/ghost-model/endpoints").status_code == 404

    with chromium() as browser:
        browser.get(f"{service}/?every=250")
        shown = wait_for(
            lambda: browser.execute_script(_READ_ENDPOINTS, name),
            lambda got: got is not None and len(got["rows"]) == 2,
            "the endpoints panel",
        )
        assert shown is not None
        rows = {r["expert"]: r for r in shown["rows"]}
        assert shown["deadline"] == "200"
        for e in ("good", "bad"):
            assert rows[e]["breaker"] == rows[e]["shown"] == by[e]["breaker"]
            assert rows[e]["failures"] == str(by[e]["failures"])
            assert rows[e]["recent"] == by[e]["recent"]
        assert rows["bad"]["text"] == "error 3 · open 2"
        # a model without endpoints has no such panel
        assert browser.execute_script(_READ_ENDPOINTS, plain) is None
