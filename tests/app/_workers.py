"""Reaching every worker of a multi-worker service: each answer names its worker
(``X-Committee-Worker``), so a test can ask until all of them have answered."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

TRIES = 200  # requests on new connections before giving up on reaching every worker


def from_each_worker(workers: int, ask: Callable[[], httpx.Response]) -> dict[str, httpx.Response]:
    """One answer of each of ``workers`` workers, by worker; ``ask`` should open a new
    connection per request (``Connection: close``) so that any worker may take it."""
    got: dict[str, httpx.Response] = {}
    for _ in range(TRIES):
        r = ask()
        got.setdefault(r.headers["x-committee-worker"], r)
        if len(got) == workers:
            return got
    pytest.fail(f"{TRIES} requests reached {len(got)} of {workers} workers")
