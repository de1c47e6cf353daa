"""What the client raises: one exception per kind of failure, all :class:`CommitteeError`.

The service answers an error with a JSON body ``{"detail": ...}``: a message, or for a
422 a list of ``{"loc", "msg", "type"}`` entries naming the field. :func:`from_response`
turns such an answer into the matching exception; :func:`from_item` does the same for
one failed item of a batch or a stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "CommitteeError",
    "Conflict",
    "ConnectionFailed",
    "Forbidden",
    "InvalidInput",
    "NotFound",
    "RateLimited",
    "ServerError",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "from_item",
    "from_response",
]


class CommitteeError(Exception):
    """Base class of every client error.

    Attributes
    ----------
    status
        The HTTP status the service answered, or None when no answer came.
    detail
        The ``detail`` of the answer as sent (a message, or a list of field errors).
    message
        A one-line description, also ``str(error)``.
    """

    def __init__(self, status: int | None, detail: Any, message: str | None = None) -> None:
        self.status = status
        self.detail = detail
        self.message = message if message is not None else str(detail)
        super().__init__(self.message if status is None else f"{status}: {self.message}")


class Unauthorized(CommitteeError):
    """401: auth is on and no valid API key came (none, unknown or revoked): pass
    ``api_key=`` or set ``COMMITTEE_API_KEY``."""


class Forbidden(CommitteeError):
    """403: the key is valid but its scope does not allow this call (a read key that
    learns, say), or it is confined to other models than the one being created."""


class NotFound(CommitteeError):
    """404: no such model, or no pending trial with this id (unknown or expired)."""


class Conflict(CommitteeError):
    """409: the model name is taken, or the trial is labelled differently or its id is taken."""


class InvalidInput(CommitteeError):
    """422: the request is wrong for this model; ``field`` names where (``instance.features``).

    ``errors`` keeps every field error as ``(field, message)``; ``field`` is the first.
    """

    def __init__(self, status: int, detail: Any, errors: list[tuple[str | None, str]]) -> None:
        self.errors = errors or [(None, str(detail))]
        self.field = self.errors[0][0]
        message = "; ".join(f"{f}: {m}" if f else m for f, m in self.errors)
        super().__init__(status, detail, message)


class TooLarge(CommitteeError):
    """413: the request body is over the service's limit; send smaller batches."""


class Unavailable(CommitteeError):
    """503 (or 502/504): the service cannot answer now; ``retry_after`` in seconds if sent."""

    def __init__(self, status: int | None, detail: Any, retry_after: float | None = None) -> None:
        super().__init__(status, detail)
        self.retry_after = retry_after


class ConnectionFailed(Unavailable):
    """No answer came: the connection failed or timed out (``status`` is None).

    ``sent`` is False when the request certainly did not reach the service (the
    connection could not be made), True when it may have (a timeout while waiting for
    the answer, a dropped connection): a ``learn`` may then have been applied.
    """

    def __init__(self, detail: str, *, sent: bool) -> None:
        super().__init__(None, detail)
        self.sent = sent


class RateLimited(Unavailable):
    """429: a rate limit or quota was reached; ``limit`` names it (``requests_per_second``,
    ``trials_per_second``, ``max_models``, ``max_stored_models``...) and ``max`` is its value.

    An :class:`Unavailable`: nothing of the request was applied and the service says when
    to try again, so every call is retried after ``retry_after`` seconds like a 503, and
    ``except Unavailable`` catches both.

    >>> e = from_response(429, {"detail": "slow down", "limit": "requests_per_second",
    ...                         "max": 2}, retry_after="1")
    >>> type(e).__name__, e.retry_after, e.limit, e.max
    ('RateLimited', 1.0, 'requests_per_second', 2)
    """

    def __init__(self, status: int, detail: Any, retry_after: float | None, body: Any) -> None:
        super().__init__(status, detail, retry_after)
        fields = body if isinstance(body, Mapping) else {}
        self.limit: str | None = fields.get("limit")
        self.max: float | None = fields.get("max")


class ServerError(CommitteeError):
    """500 or another 5xx: a fault of the service (other 4xx are plain CommitteeError)."""


def _field(loc: Any) -> str | None:
    parts = [str(p) for p in loc] if isinstance(loc, list | tuple) else []
    if parts[:1] == ["body"]:
        parts = parts[1:]
    return ".".join(parts) or None


def _errors(detail: Any) -> list[tuple[str | None, str]]:
    if not isinstance(detail, list):
        return [(None, str(detail))]
    out: list[tuple[str | None, str]] = []
    for d in detail:
        if isinstance(d, Mapping):
            out.append((_field(d.get("loc")), str(d.get("msg", d))))
        else:
            out.append((None, str(d)))
    return out


def _retry_after(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else None
    except ValueError:  # an HTTP date: rare, and the client's own backoff applies
        return None
    return seconds if seconds is not None and seconds >= 0 else None


def from_response(status: int, body: Any, retry_after: str | None = None) -> CommitteeError:
    """The exception for an error answer with ``status`` and decoded JSON ``body``."""
    detail = body.get("detail", body) if isinstance(body, Mapping) else body
    if status == 401:
        return Unauthorized(status, detail)
    if status == 403:
        return Forbidden(status, detail)
    if status == 404:
        return NotFound(status, detail)
    if status == 429:
        return RateLimited(status, detail, _retry_after(retry_after), body)
    if status == 409:
        return Conflict(status, detail)
    if status == 422:
        return InvalidInput(status, detail, _errors(detail))
    if status == 413:
        return TooLarge(status, detail)
    if status in (502, 503, 504):
        return Unavailable(status, detail, _retry_after(retry_after))
    if status >= 500:
        return ServerError(status, detail)
    return CommitteeError(status, detail)


def from_item(error: Mapping[str, Any]) -> CommitteeError:
    """The exception for one failed item ``{"status", "message", "field"}``."""
    status, message = int(error["status"]), str(error["message"])
    if status == 422:
        return InvalidInput(status, message, [(error.get("field"), message)])
    return from_response(status, {"detail": message})
