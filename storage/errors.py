"""What storage reports, in the project's terms rather than Redis's."""

from __future__ import annotations

__all__ = [
    "Conflict",
    "CorruptData",
    "Full",
    "ModelNotFound",
    "StorageError",
    "Unavailable",
]


class StorageError(Exception):
    """Base class of every storage failure."""


class ModelNotFound(StorageError):
    """The model does not exist (or was deleted and re-created meanwhile)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"model {name!r} does not exist")
        self.name = name


class Conflict(StorageError):
    """The write contradicts what is stored (for example the model already exists)."""


class Unavailable(StorageError):
    """Redis cannot be reached or did not answer in time."""


class CorruptData(StorageError):
    """What came back from Redis is not what the service writes."""


class Full(StorageError):
    """A quota is reached: ``limit`` names the setting, ``most`` its value."""

    def __init__(self, limit: str, most: int, message: str) -> None:
        super().__init__(message)
        self.limit = limit
        self.most = most
