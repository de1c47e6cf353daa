"""What both HTTP clients share around a request: decoding answers, mapping failures to
the client's errors, and the log line of a retry."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

import httpx

from committee_client._calls import Call
from committee_client.errors import CommitteeError, ConnectionFailed, from_response

__all__ = [
    "API_KEY_VARIABLE",
    "DEFAULT_URL",
    "connection_failed",
    "error_of",
    "headers_with_key",
    "log",
    "read_json",
    "retry_log",
]

DEFAULT_URL = "http://127.0.0.1:8000"
API_KEY_VARIABLE = "COMMITTEE_API_KEY"
log = logging.getLogger("committee.client")

# the request was never written: safe to send again, whatever the call
_UNSENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def headers_with_key(headers: Mapping[str, str] | None, api_key: str | None) -> dict[str, str]:
    """``headers`` with ``Authorization: Bearer <key>``: ``api_key``, else the
    ``COMMITTEE_API_KEY`` variable; an empty key is none, and an ``Authorization``
    given in ``headers`` stays.

    >>> headers_with_key({"x-team": "ops"}, "cmk_x")
    {'x-team': 'ops', 'Authorization': 'Bearer cmk_x'}
    >>> headers_with_key({"authorization": "Bearer cmk_proxy"}, "cmk_x")
    {'authorization': 'Bearer cmk_proxy'}
    """
    out = dict(headers or {})
    key = api_key if api_key is not None else os.environ.get(API_KEY_VARIABLE, "").strip()
    if key and not any(k.lower() == "authorization" for k in out):
        out["Authorization"] = f"Bearer {key}"
    return out


def read_json(r: httpx.Response) -> Any:
    """The decoded body of an answer, None when empty (204)."""
    return json.loads(r.content) if r.content else None


def error_of(r: httpx.Response) -> CommitteeError:
    """The client's error for an error answer (a body that isn't JSON becomes the detail)."""
    try:
        body = read_json(r)
    except ValueError:  # not JSON, or not UTF-8
        body = {"detail": r.text or r.reason_phrase}
    return from_response(r.status_code, body, r.headers.get("retry-after"))


def connection_failed(e: httpx.TransportError) -> ConnectionFailed:
    """The client's error for a failed connection, knowing whether the request was sent."""
    what = type(e).__name__
    error = ConnectionFailed(f"{what}: {e}" if str(e) else what, sent=not isinstance(e, _UNSENT))
    error.__cause__ = e
    return error


def retry_log(call: Call[Any], error: CommitteeError, attempt: int, of: int, wait: float) -> None:
    """One warning per retry: the call and its error, never a header (the API key)."""
    log.warning(
        "%s %s failed (%s); retry %d of %d in %.2f s",
        call.method,
        call.path,
        error,
        attempt,
        of - 1,
        wait,
    )
