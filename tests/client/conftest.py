"""Fixtures of the client tests: the real app on loopback, a service with API keys, and
ways to break it on purpose: a service over a Redis of its own, a port that never answers."""

from __future__ import annotations

import socket
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from _clientkit import FAST, MAX_BODY
from _server import ServerThread

from app.core.settings import Settings
from committee_client import Client
from storage.server import EmbeddedRedis


@pytest.fixture(scope="session")
def service_url(redis_url: str) -> Iterator[str]:
    """Base URL of the app served for the client tests (small body limit: 64 KiB)."""
    prefix = f"c-{uuid.uuid4().hex[:12]}"
    settings = Settings(redis_url=redis_url, key_prefix=prefix, max_body_bytes=MAX_BODY)
    with ServerThread(settings) as server:
        yield server.url


@pytest.fixture
def client(service_url: str) -> Iterator[Client]:
    with Client(service_url, timeout=30, retry=FAST) as c:
        yield c


@pytest.fixture
def secured(redis_url: str) -> Iterator[tuple[str, str]]:
    """A service of its own with auth on: its base URL and an admin key (made over REST
    while the service had no key, which turned auth on)."""
    settings = Settings(redis_url=redis_url, key_prefix=f"ca-{uuid.uuid4().hex[:12]}")
    with ServerThread(settings) as server:
        with Client(server.url, api_key="", retry=FAST) as c:
            admin = c.create_key("admin", name="root")
        yield server.url, admin.key


@pytest.fixture
def name() -> str:
    """A model name of this test's own."""
    return f"m-{uuid.uuid4().hex[:16]}"


@pytest.fixture
def own_redis() -> Iterator[EmbeddedRedis]:
    """A Redis of this test's own, to stop and restart (a short path: a unix socket)."""
    with tempfile.TemporaryDirectory(prefix="cr-") as d, EmbeddedRedis(Path(d)) as server:
        yield server


@pytest.fixture
def fragile(own_redis: EmbeddedRedis) -> Iterator[str]:
    """Base URL of an app over ``own_redis``."""
    settings = Settings(redis_url=own_redis.url, key_prefix="fragile")
    with ServerThread(settings) as server:
        yield server.url


@pytest.fixture
def silent() -> Iterator[tuple[str, list[int]]]:
    """A loopback port that accepts connections and never answers; with the count of
    connections made to it."""
    accepted = [0]
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            accepted[0] += 1
            held.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()
