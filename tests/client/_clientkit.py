"""Shared pieces of the client tests: model configs, the app served in a thread, a
transport that counts requests."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import uvicorn

from app.config import Settings
from app.main import create_app
from client import Retry

MAX_BODY = 64 * 1024
FUSION = {
    "labels": ["cat", "dog", "bird"],
    "experts": {"expert_names": ["cnn", "svm", "knn"], "normalize": "sum-to-one"},
    "learner": {"kind": "committee", "alpha": 1.5},
}
SPARSE = {
    "labels": [1, -1],
    "attributes": {"n_features": 1000},
    "learner": {"kind": "balanced-winnow", "alpha": 1.2},
}
FAST = Retry(attempts=3, backoff=0.01, max_delay=0.05, jitter=0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """The app in a uvicorn thread of this process, stopped on exit."""

    def __init__(self, settings: Settings) -> None:
        self.port = free_port()
        config = uvicorn.Config(
            create_app(settings), host="127.0.0.1", port=self.port, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Served:
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


class Counting(httpx.HTTPTransport):
    """The real transport, counting the requests it sends (to see retries)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return super().handle_request(request)
