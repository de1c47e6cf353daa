"""How errors map to HTTP status codes and bodies (one table for the whole API)."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError

from app.core.errors import (
    BadInput,
    ChallengerNotFound,
    Forbidden,
    TrialConflict,
    TrialExpired,
    TrialNotFound,
)
from storage.errors import (
    Conflict,
    CorruptData,
    Full,
    ModelNotFound,
    RateLimited,
    StorageError,
    Unavailable,
)

__all__ = ["MAPPED", "error_body", "error_status", "item_error", "rate_headers"]

_TABLE: tuple[tuple[type[Exception], int], ...] = (
    (BadInput, 422),
    (Forbidden, 403),
    (ModelNotFound, 404),
    (ChallengerNotFound, 404),
    (TrialExpired, 404),
    (TrialNotFound, 404),
    (TrialConflict, 409),
    (Conflict, 409),
    (Full, 429),
    (Unavailable, 503),
    (CorruptData, 500),
    (StorageError, 500),
)
#: the exceptions the app answers with :func:`error_body`
MAPPED = tuple(cls for cls, _ in _TABLE)


def error_status(e: Exception) -> tuple[int, str]:
    """The status code and message for an error raised by the service."""
    for cls, code in _TABLE:
        if isinstance(e, cls):
            return code, (e.message if isinstance(e, BadInput) else str(e))
    return 500, "internal error"


def error_body(e: Exception) -> tuple[int, dict[str, Any], dict[str, str] | None]:
    """Status, JSON body and headers of the answer to ``e``.

    A 422 has FastAPI's shape, ``{"detail": [{"loc", "msg", "type"}]}``, its ``loc``
    naming the field; a 429 names the limit, ``{"detail", "limit", "max"}``; the others
    are ``{"detail": message}``; a 503 says when to retry.
    """
    if isinstance(e, RequestValidationError):
        return 422, {"detail": [_plain_error(err) for err in jsonable_encoder(e.errors())]}, None
    if isinstance(e, BadInput):
        loc = [e.where, *e.field.split(".")]
        return 422, {"detail": [{"loc": loc, "msg": e.message, "type": "value_error"}]}, None
    code, message = error_status(e)
    if isinstance(e, RateLimited):
        return code, {"detail": message, "limit": e.limit, "max": e.most}, rate_headers(e)
    if isinstance(e, Full):
        return code, {"detail": message, "limit": e.limit, "max": e.most}, {"Retry-After": "1"}
    return code, {"detail": message}, ({"Retry-After": "1"} if code == 503 else None)


#: the tags of bodies that take one of several shapes (a model made, or forked): a field's
#: path names the field, not the shape
BODY_TAGS = frozenset({"create", "fork"})


def _plain_error(err: dict[str, Any]) -> dict[str, Any]:
    """A validation error whose echoed ``input`` and ``ctx`` JSON can write: an integer
    beyond 64 bits (which orjson refuses) or an exception object is dropped; its ``loc``
    without the body's shape tag."""
    out = dict(err)
    loc = out.get("loc")
    if isinstance(loc, list | tuple) and len(loc) > 1 and loc[0] == "body" and loc[1] in BODY_TAGS:
        out["loc"] = [loc[0], *loc[2:]]
    for field in ("input", "ctx"):
        if field in out:
            try:
                orjson.dumps(out[field])
            except TypeError:
                out[field] = (
                    None if field == "input" else {k: str(v) for k, v in out[field].items()}
                )
    return out


def rate_headers(e: RateLimited) -> dict[str, str]:
    """``Retry-After`` and the ``RateLimit-*`` fields of a key's 429: the bucket's size,
    the tokens left, the seconds until enough are back, and the policy (rate per second
    and burst)."""
    return {
        "Retry-After": str(e.retry_after),
        "RateLimit-Limit": str(int(e.capacity)),
        "RateLimit-Remaining": str(max(0, int(e.left))),
        "RateLimit-Reset": str(e.retry_after),
        "RateLimit-Policy": f"{e.rate:g};w=1;burst={e.capacity:g}",
    }


def item_error(e: Exception, where: str = "") -> dict[str, Any]:
    """``{"status", "message", "field"}`` for one item of a batch or a stream; ``where``
    prefixes the field (``items.3.``)."""
    code, message = error_status(e)
    field = f"{where}{e.field}" if isinstance(e, BadInput) else None
    return {"status": code, "message": message, "field": field}
