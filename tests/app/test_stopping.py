"""A worker stops its background loops between their calls to Redis, never in the middle
of one: redis-py's client can leave a task cancelled mid-command waiting forever, and the
worker then stops only when its shutdown timeout cuts the wait short, or not at all."""

from __future__ import annotations

import logging
import time

import pytest
from _server import ServerThread

from app import auth, service
from app.config import Settings


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
    monkeypatch.setattr(auth, "REFRESH", 0.0)
    _stops_cleanly(redis_url, redis_prefix, caplog)


def test_a_worker_stops_while_its_sweep_reads_redis_back_to_back(
    redis_url: str,
    redis_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Likewise the sweep of deleted models' trials, with no pause between its rounds."""
    monkeypatch.setattr(service, "SWEEP_EVERY", 0.0)
    _stops_cleanly(redis_url, redis_prefix, caplog)
