"""A worker stops watching its key table between reads, never in the middle of one."""

from __future__ import annotations

import logging
import time

import pytest
from _server import ServerThread

from app import auth
from app.config import Settings


def test_a_worker_stops_while_its_key_watch_reads_redis_back_to_back(
    redis_url: str,
    redis_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With no pause between its reads of the key table's version, a stopping worker
    meets the watch in the middle of a read each time. The watch is asked to stop and
    ends after that read: redis-py's client can leave a task cancelled in the middle of
    a command waiting forever, and the worker then stops only when its shutdown timeout
    cuts the wait short."""
    caplog.set_level(logging.ERROR)
    monkeypatch.setattr(auth, "REFRESH", 0.0)
    settings = Settings(
        redis_url=redis_url, key_prefix=redis_prefix, warmup=False, shutdown_timeout=2
    )
    for _ in range(5):
        server = ServerThread(settings)
        with server:
            time.sleep(0.05)  # the watch reads meanwhile
        assert not server.thread.is_alive(), "the worker did not finish stopping"
    cut = [r.getMessage() for r in caplog.records if "cut short" in r.getMessage()]
    assert cut == []
