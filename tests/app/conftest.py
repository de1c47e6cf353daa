"""The real app, served by uvicorn on loopback, against the session's private Redis."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from app.config import Settings
from app.main import create_app
from models.warm import warm_kernels


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerThread:
    """uvicorn in a thread of this process, stopped on exit."""

    def __init__(self, settings: Settings, app: FastAPI | None = None) -> None:
        self.port = free_port()
        config = uvicorn.Config(
            app or create_app(settings), host="127.0.0.1", port=self.port, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="session", autouse=True)
def kernels_compiled() -> None:
    """Every kernel compiled once, into numba's disk cache, before the first test here:
    the services these tests start (in threads or in processes of their own) then load
    them at once instead of each compiling them while a test waits for it."""
    warm_kernels()


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
