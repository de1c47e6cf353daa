"""Drift alerts over HTTP, on the real app and a real Redis: a rise of the error rate at a
known trial raises one alert on every worker alike, within the detector's documented
delay, marked on the curve, counted in /metrics and POSTed once to a webhook on loopback;
none on a stationary stream; the webhook's host refused unless the operator allows it;
the alert kept across a restart from a snapshot; ``rollback`` rolls the model back."""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
from _procs import Service
from _workers import json_from_each_worker

from models.drift import STEP_DELAY

DELAY = STEP_DELAY["page-hinkley"]


class Receiver:
    """A webhook receiver on loopback: the bodies it was POSTed, in order."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        lock = threading.Lock()
        bodies = self.bodies

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["content-length"]))
                with lock:
                    bodies.append(orjson.loads(raw))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _model(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "labels": ["a", "b"],
        "input": {"experts": {"expert_names": ["x", "y"]}},
        "learner": {"kind": "weighted-majority"},
    }


def _stream(rng: np.random.Generator, n: int, error: float) -> list[dict[str, Any]]:
    """``n`` trials on which both experts vote the wrong label with probability ``error``:
    the model's served prediction is wrong exactly then."""
    out = []
    for _ in range(n):
        y = "a" if rng.random() < 0.5 else "b"
        vote = ("b" if y == "a" else "a") if rng.random() < error else y
        out.append({"instance": {"experts": {"x": vote, "y": vote}}, "label": y})
    return out


def _learn(c: httpx.Client, name: str, items: list[dict[str, Any]]) -> None:
    for at in range(0, len(items), 500):
        got = c.post(f"/v1/models/{name}/learn/batch", json={"items": items[at : at + 500]})
        assert got.status_code == 200, got.text


def _wait(what: str, check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.1)
    return got


def test_a_rise_of_the_error_rate_raises_one_alert_on_every_worker_and_one_webhook(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    name, change = "drifting", 3_001  # the first trial at the higher error rate
    rng = np.random.default_rng(7)
    items = _stream(rng, change - 1, 0.1) + _stream(rng, 1_000, 0.4)
    env = {"COMMITTEE_ALERT_ALLOWED_HOSTS": "127.0.0.1:*", "COMMITTEE_SNAPSHOT_EVERY": "500"}
    env["COMMITTEE_LOG_RETAIN"] = "0"  # a restart reads the alert from the snapshot alone
    with Receiver() as hook:
        with Service(tmp_path, workers=4, redis_url=redis_url, prefix=redis_prefix, env=env) as svc:
            with httpx.Client(base_url=svc.url, timeout=30) as c:
                assert c.post("/v1/models", json=_model(name)).status_code == 201
                got = c.put(f"/v1/models/{name}/alerts", json={"webhook_url": hook.url})
                assert got.status_code == 200, got.text
                assert got.json()["config"] == {"webhook_url": hook.url, "rollback": False}
                _learn(c, name, items)
            path = f"/v1/models/{name}/alerts"
            answers = json_from_each_worker(svc.url, path, 4)
            first = next(iter(answers.values()))
            assert all(a["alerts"] == first["alerts"] for a in answers.values())
            alerts = first["alerts"]
            model = [a for a in alerts if a["what"] == "model"]
            assert len(model) == 1, alerts
            assert change <= model[0]["seq"] < change + DELAY
            assert model[0]["before"] < 0.2 < model[0]["after"]
            # each expert's stream is the model's here: the same rise, the same seq
            assert {a["what"] for a in alerts} == {"model", "expert:x", "expert:y"}
            assert all(a["seq"] == model[0]["seq"] for a in alerts)
            # once each: to the webhook, on the curve, in the counters
            _wait("webhooks", lambda: len(hook.bodies) >= len(alerts))
            with httpx.Client(base_url=svc.url, timeout=30) as c:
                stats = c.get(f"/v1/models/{name}/stats").json()
                metrics = c.get("/metrics").text
            marks = [ch for ch in stats["changes"] if ch["what"].startswith("drift ")]
            assert sorted(m["version"] for m in marks) == [model[0]["seq"]] * len(alerts)
            counted = [
                line
                for line in metrics.splitlines()
                if line.startswith("committee_model_alerts_total{") and f'model="{name}"' in line
            ]
            assert sorted(float(line.rsplit(" ", 1)[1]) for line in counted) == [1.0, 2.0]
        # a restart: the alerts come back from the snapshot and are not raised again
        with (
            Service(tmp_path, workers=1, redis_url=redis_url, prefix=redis_prefix, env=env) as svc,
            httpx.Client(base_url=svc.url, timeout=30) as c,
        ):
            versions = c.get(f"/v1/models/{name}/versions").json()
            assert versions["snapshot"] > model[0]["seq"]  # the log before it trimmed
            assert versions["log"]["entries"] == 0 or versions["log"]["first"] > model[0]["seq"]
            assert c.get(path).json()["alerts"] == alerts
            _learn(c, name, _stream(rng, 100, 0.4))  # the worker holds it a while
            time.sleep(1.0)
    got = sorted((b["alert"]["what"], b["alert"]["seq"]) for b in hook.bodies)
    assert got == sorted((a["what"], a["seq"]) for a in alerts)
    assert all(b["model"] == name for b in hook.bodies)


def test_no_alert_on_a_stationary_stream(client: httpx.Client, model_name: str) -> None:
    assert client.post("/v1/models", json=_model(model_name)).status_code == 201
    _learn(client, model_name, _stream(np.random.default_rng(3), 5_000, 0.25))
    got = client.get(f"/v1/models/{model_name}/alerts").json()
    assert got["version"] == 5_000 and got["alerts"] == []
    assert got["detector"]["kind"] == "page-hinkley" and got["detector"]["delay"] == DELAY
    assert 0.15 < got["error_rate"] < 0.35 and set(got["experts"]) == {"expert:x", "expert:y"}


def test_a_webhook_host_the_operator_did_not_allow_is_refused(
    client: httpx.Client, model_name: str
) -> None:
    assert client.post("/v1/models", json=_model(model_name)).status_code == 201
    url = f"/v1/models/{model_name}/alerts"
    got = client.put(url, json={"webhook_url": "http://127.0.0.1:9/hook"})
    assert got.status_code == 422, got.text
    assert "webhook_url" in got.text and "COMMITTEE_ALERT_ALLOWED_HOSTS" in got.text
    assert client.get(url).json()["config"] is None
    assert client.put(url, json={"rollback": True}).json()["config"] == {
        "webhook_url": None,
        "rollback": True,
    }
    assert client.get("/v1/models/nobody-here/alerts").status_code == 404


def test_rollback_on_an_alert_rolls_the_model_back_before_the_change(
    client: httpx.Client, model_name: str
) -> None:
    name, change = model_name, 2_001
    assert client.post("/v1/models", json=_model(name)).status_code == 201
    assert client.put(f"/v1/models/{name}/alerts", json={"rollback": True}).status_code == 200
    rng = np.random.default_rng(11)
    _learn(client, name, _stream(rng, change - 1, 0.1) + _stream(rng, 600, 0.4))
    alert = next(a for a in client.get(f"/v1/models/{name}/alerts").json()["alerts"])
    since = alert["since"]
    assert alert["seq"] - since == 255 and since < change + DELAY

    def rolled() -> list[dict[str, Any]]:
        changes = client.get(f"/v1/models/{name}/versions").json()["changes"]
        return [ch for ch in changes if ch["what"].startswith("rolled back")]

    done = _wait("the rollback", rolled)
    assert done == [{"version": done[0]["version"], "what": f"rolled back to {since - 1}"}]
