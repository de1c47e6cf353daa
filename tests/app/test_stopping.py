"""A worker stops its background work between its calls to Redis, never in the middle
of one: redis-py's client can leave a task cancelled mid-command waiting forever, and the
worker then stops only when its shutdown timeout cuts the wait short, or not at all. What
was waiting to be done (folding outcomes) is done as it stops."""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx
import numpy as np
import pytest
from _procs import sync_client
from _server import ServerThread

from app.core.settings import Settings
from app.service import access, model_service, replicas
from storage.keys import Keys


def _stops_cleanly(redis_url: str, redis_prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    """Five in-process servers, each stopped a moment after it started, all stop, and
    none has its stop cut short by the shutdown timeout (2 s)."""
    caplog.set_level(logging.ERROR)
    settings = Settings(
        redis_url=redis_url, key_prefix=redis_prefix, warmup=False, shutdown_timeout=2
    )
    for _ in range(5):
        server = ServerThread(settings)
        with server:
            time.sleep(0.05)  # the loop reads Redis meanwhile
        assert not server.thread.is_alive(), "the worker did not finish stopping"
    cut = [r.getMessage() for r in caplog.records if "cut short" in r.getMessage()]
    assert cut == []


def test_a_worker_stops_while_its_key_watch_reads_redis_back_to_back(
    redis_url: str,
    redis_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With no pause between its reads of the key table's version, a stopping worker
    meets the watch in the middle of a read each time."""
    monkeypatch.setattr(access, "REFRESH", 0.0)
    _stops_cleanly(redis_url, redis_prefix, caplog)


def test_a_worker_stops_while_its_sweep_reads_redis_back_to_back(
    redis_url: str,
    redis_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Likewise the sweep of deleted models' trials, with no pause between its rounds."""
    monkeypatch.setattr(model_service, "SWEEP_EVERY", 0.0)
    _stops_cleanly(redis_url, redis_prefix, caplog)


def _binary(n: int) -> dict[str, Any]:
    return {
        "labels": [1, -1],
        "input": {"attributes": {"n_features": n}},
        "learner": {"kind": "balanced-winnow", "alpha": 1.5},
    }


def _meta(redis_url: str, prefix: str, name: str) -> tuple[int, int]:
    """(version, folded) of a model as Redis holds it."""
    with sync_client(redis_url) as r:
        meta = r.hgetall(Keys(prefix, name).meta)
    return int(meta[b"version"]), int(meta.get(b"folded", b"0"))


def test_a_stopping_worker_folds_the_outcomes_it_holds_at_once(
    redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outcomes of a worker's last trials wait a moment to be folded with the next
    call's; a worker stopping meanwhile folds them as it stops, not left for another
    worker to find (here the wait is a minute, so nothing else would fold them)."""
    monkeypatch.setattr(replicas, "FLUSH_DELAY", 60.0)
    settings = Settings(redis_url=redis_url, key_prefix=redis_prefix, warmup=False)
    name = "folded-at-stop"
    with ServerThread(settings) as server, httpx.Client(base_url=server.url, timeout=30) as c:
        made = c.post("/v1/models", json={"name": name, **_binary(4)})
        assert made.status_code == 201, made.text
        for i in range(6):
            body = {"instance": {"features": [i % 2, 1, 0, 1]}, "label": 1 if i % 2 else -1}
            r = c.post(f"/v1/models/{name}/learn", json=body)
            assert r.status_code == 200, r.text
        version, folded = _meta(redis_url, redis_prefix, name)
        assert (version, folded) == (6, 5)  # the last trial's outcome is held
        started = time.monotonic()
    assert not server.thread.is_alive()
    assert time.monotonic() - started < 10
    assert _meta(redis_url, redis_prefix, name) == (6, 6)


BACKTEST_BATCHES = 40


def test_a_stopping_worker_ends_its_backtest_as_stopped_and_keeps_its_progress(
    redis_url: str, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A backtest running when its worker stops ends at its next step: the job says why
    and keeps what it had counted, and the stop is not cut short waiting for it."""
    caplog.set_level(logging.ERROR)
    settings = Settings(
        redis_url=redis_url, key_prefix=redis_prefix, warmup=False, shutdown_timeout=20
    )
    name = "backtest-at-stop"
    with ServerThread(settings) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        made = c.post("/v1/models", json={"name": name, **_binary(8)})
        assert made.status_code == 201, made.text
        rng = np.random.default_rng(3)
        for _ in range(BACKTEST_BATCHES):  # a log long enough to outlast the stop
            xs = rng.integers(2, size=(2_000, 8))
            items = [
                {"instance": {"features": x.tolist()}, "label": 1 if x[0] | x[3] else -1}
                for x in xs
            ]
            r = c.post(f"/v1/models/{name}/learn/batch", json={"items": items})
            assert r.status_code == 200, r.text
        learners = [
            {"kind": "balanced-winnow", "alpha": 2.0},
            {"kind": "perceptron"},
            {"kind": "balanced-winnow", "alpha": 1.1},
        ]
        started = c.post(f"/v1/models/{name}/backtest", json={"learner": learners, "wait": 0})
        assert started.status_code == 202, started.text
        job_id = started.json()["id"]
    assert not server.thread.is_alive()
    assert [r.getMessage() for r in caplog.records if "cut short" in r.getMessage()] == []
    with ServerThread(settings) as server, httpx.Client(base_url=server.url, timeout=30) as c:
        job = c.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "failed" and job["error"] == "the worker running it stopped", job
    done = job["progress"]["done"]
    assert 0 <= done < 2_000 * BACKTEST_BATCHES and job["result"]["model"]["trials"] == done
