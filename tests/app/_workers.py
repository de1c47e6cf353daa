"""Reaching every worker of a multi-worker service: each answer names its worker
(``X-Committee-Worker``), so a test can ask until all of them have answered."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

TRIES = 200  # requests on new connections, at least, before giving up on reaching every worker
# and seconds: a worker uvicorn has just started (in place of one it found hung) takes
# connections only once it is ready, which a slow machine may take seconds longer to be
PATIENCE = 60.0


def from_each_worker(workers: int, ask: Callable[[], httpx.Response]) -> dict[str, httpx.Response]:
    """One answer of each of ``workers`` workers, by worker; ``ask`` should open a new
    connection per request (``Connection: close``) so that any worker may take it."""
    got: dict[str, httpx.Response] = {}
    deadline = time.monotonic() + PATIENCE
    tries = 0
    while tries < TRIES or time.monotonic() < deadline:
        r = ask()
        tries += 1
        got.setdefault(r.headers["x-committee-worker"], r)
        if len(got) == workers:
            return got
    pytest.fail(f"{tries} requests reached {len(got)} of {workers} workers")


def json_from_each_worker(url: str, path: str, workers: int) -> dict[str, Any]:
    """``GET path``'s answer (a 200, as JSON) from each of ``workers`` workers, by worker."""
    with httpx.Client(base_url=url, timeout=30, headers={"Connection": "close"}) as c:
        got = from_each_worker(workers, lambda: c.get(path))
    for worker, r in got.items():
        assert r.status_code == 200, (worker, r.text)
    return {worker: r.json() for worker, r in got.items()}
