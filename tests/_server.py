"""The real app served by uvicorn in a thread of the test process, on a free loopback port."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from fastapi import FastAPI

from app.core.settings import Settings
from app.http.main import create_app

__all__ = ["ServerThread", "free_port"]

START_TIMEOUT = 20.0  # seconds for uvicorn to start listening
WARM_TIMEOUT = 180.0  # seconds for the process's kernel warm-up (compiling on a cold cache)
STOP_TIMEOUT = 10.0
# seconds a stopping server gives requests still in flight (as `committee serve` gives
# shutdown_timeout): an event stream a page or a test left open ends then
GRACE = 2
KEEP_ALIVE = 120  # seconds an idle connection stays open


def free_port() -> int:
    """A loopback port that was free when asked."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerThread:
    """uvicorn serving ``app`` (by default the app of ``settings``) in a daemon thread, from
    ``with`` entry (once the app is ready: its kernels warm) until exit; ``url`` is its base
    URL."""

    def __init__(self, settings: Settings, app: FastAPI | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = app or create_app(settings)
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            # a test's pooled connections stay open between its phases, even when a busy
            # machine holds the process for seconds: the server closing one idle just as
            # the client reuses it would cut that request
            timeout_keep_alive=KEEP_ALIVE,
            timeout_graceful_shutdown=GRACE,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        # ready, as a client waiting on /readyz would find it: the warm-up is done
        warmup = getattr(self.app.state, "warmup", None)
        deadline = time.monotonic() + WARM_TIMEOUT
        while warmup is not None and not warmup.ready:
            if time.monotonic() > deadline:
                raise RuntimeError("the test server's kernels did not warm up")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(STOP_TIMEOUT)
