"""How errors map to HTTP status codes and messages (one table for the whole API)."""

from __future__ import annotations

from app.errors import BadInput, TrialConflict, TrialExpired, TrialNotFound
from storage.errors import Conflict, CorruptData, ModelNotFound, StorageError, Unavailable

__all__ = ["error_status"]

_TABLE: tuple[tuple[type[Exception], int], ...] = (
    (BadInput, 422),
    (ModelNotFound, 404),
    (TrialExpired, 404),
    (TrialNotFound, 404),
    (TrialConflict, 409),
    (Conflict, 409),
    (Unavailable, 503),
    (CorruptData, 500),
    (StorageError, 500),
)


def error_status(e: Exception) -> tuple[int, str]:
    """The status code and message for an error raised by the service."""
    for cls, code in _TABLE:
        if isinstance(e, cls):
            return code, (e.message if isinstance(e, BadInput) else str(e))
    return 500, "internal error"
