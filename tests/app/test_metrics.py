"""Prometheus metrics over HTTP."""

from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families


def scrape(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def test_metrics_show_models_and_requests(client: httpx.Client, model_name: str) -> None:
    body = {
        "name": model_name,
        "labels": ["x", "y"],
        "input": {"experts": {"expert_names": ["a", "b"]}},
        "learner": {"kind": "committee"},
        "label_ttl": 0.05,
    }
    client.post("/v1/models", json=body)
    url = f"/v1/models/{model_name}"
    items = [{"instance": {"experts": {"a": "x"}}, "label": "y"}] * 5
    client.post(f"{url}/learn/batch", json={"items": items})
    client.post(f"{url}/predict", json={"instance": {"experts": {"b": "y"}}})
    time.sleep(0.2)  # folded, and the prediction overdue
    m = (("model", model_name),)
    got = scrape(client)
    assert got["committee_model_version_total", m] == 5
    assert got["committee_model_learned_total", m] == 5
    assert got["committee_model_mistakes_total", m] == client.get(f"{url}/stats").json()["mistakes"]
    assert got["committee_model_expired_total", m] == 1
    assert got["committee_model_pending", m] == 0
    route = (("method", "POST"), ("route", "/v1/models/{name}/learn/batch"), ("status", "200"))
    assert got["committee_request_duration_seconds_count", route] >= 1
