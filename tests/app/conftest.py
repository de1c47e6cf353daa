"""The real app, served by uvicorn on loopback, against the session's private Redis."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
from _server import ServerThread

from app.core.settings import Settings
from app.service.warmup import warm_here


@pytest.fixture(scope="session", autouse=True)
def kernels_compiled() -> None:
    """This process's warm-up, run before the first test here as a server's parent runs
    it before it forks its workers: every kernel compiled once into numba's disk cache,
    so the services these tests start in processes of their own load them at once; and
    the apps built in this process find it done, so no warm-up thread compiles a kernel
    while a test calls it from another (numba's dispatchers are not safe for that)."""
    warm_here()


@pytest.fixture(scope="session")
def api_settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, key_prefix=f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="session")
def api_url(api_settings: Settings) -> Iterator[str]:
    """Base URL of the app served for this session."""
    with ServerThread(api_settings) as server:
        yield server.url


@pytest.fixture(scope="session")
def server_thread() -> type[ServerThread]:
    """The class that serves an app in a thread (for tests that build their own app)."""
    return ServerThread


@pytest.fixture
def client(api_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_url, timeout=30) as c:
        yield c


@pytest.fixture
def model_name() -> str:
    """A model name of this test's own."""
    return f"m-{uuid.uuid4().hex[:16]}"
