"""Errors the service raises for the API to map to status codes (see app.http.main)."""

from __future__ import annotations

__all__ = [
    "BadInput",
    "ChallengerNotFound",
    "Forbidden",
    "TrialConflict",
    "TrialExpired",
    "TrialNotFound",
]


class BadInput(ValueError):
    """Input the service refuses (422): a request wrong for this model, or a model config
    that cannot be built or is beyond a limit.

    ``field`` names where, as a path such as ``items.3.instance.features`` or
    ``learner.alpha``; ``where`` is the part of the request it is in (``body``, ``header``
    or ``path``).
    """

    def __init__(self, field: str, message: str, where: str = "body") -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.where = where


class ChallengerNotFound(Exception):
    """The model has no challenger of that name (404)."""


class TrialNotFound(Exception):
    """No pending trial with this id (404)."""


class TrialExpired(TrialNotFound):
    """The trial's label deadline has passed (404, counted as a late label)."""


class TrialConflict(Exception):
    """The trial is already labelled differently, or its id is taken (409)."""


class Forbidden(Exception):
    """A request the caller's key does not allow (403), where no route's guard checked
    it: an admin operation sent over a stream, which needs only a write key to open."""
