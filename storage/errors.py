"""What storage reports, in the project's terms rather than Redis's."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from redis import exceptions as rex

__all__ = [
    "REDIS_DOWN",
    "Conflict",
    "CorruptData",
    "Full",
    "LogGap",
    "ModelNotFound",
    "NotDurable",
    "RateLimited",
    "StorageError",
    "Unavailable",
    "redis_errors",
    "refused",
]

# redis-py's failures that mean "not now" (a lost node, a failover, a moving slot)
REDIS_DOWN = (
    rex.ConnectionError,
    rex.TimeoutError,
    rex.BusyLoadingError,
    rex.ClusterError,
    rex.RedisClusterException,
    OSError,
)
# error replies that mean the same: the server is loading, failing over or moving a slot
_NOT_NOW = ("LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "READONLY")


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


class NotDurable(Unavailable):
    """A write was applied but not confirmed durable (COMMITTEE_ACK) in time: a retry is
    safe (labels apply once, learns carry their idempotency key)."""


class LogGap(StorageError):
    """The log no longer reaches back to what the worker has seen: reload the model."""


class CorruptData(StorageError):
    """What came back from Redis is not what the service writes."""


class Full(StorageError):
    """A quota is reached: ``limit`` names the setting, ``most`` its value."""

    def __init__(self, limit: str, most: int | float, message: str) -> None:
        super().__init__(message)
        self.limit = limit
        self.most = most


class RateLimited(Full):
    """A key's rate limit: ``rate`` per second with a bucket of ``capacity``; ``left``
    tokens remain and ``retry_after`` seconds bring enough back."""

    def __init__(
        self, limit: str, rate: float, capacity: float, left: float, retry_after: int
    ) -> None:
        most = int(rate) if float(rate).is_integer() else rate
        super().__init__(
            limit,
            most,
            f"rate limit of this key: {most:g} {limit.replace('_per_second', '')}/s "
            f"with a burst of {capacity:g}; retry after {retry_after} s",
        )
        self.rate = rate
        self.capacity = capacity
        self.left = left
        self.retry_after = retry_after


def refused(e: Exception) -> StorageError:
    """What an error reply from Redis means here: unavailable for now, or refused."""
    if str(e).startswith(_NOT_NOW):
        return Unavailable(f"Redis is not ready: {e}")
    if str(e).startswith("CORRUPT"):  # a script found a key it does not write
        return CorruptData(str(e).removeprefix("CORRUPT "))
    return StorageError(f"Redis refused a command: {e}")


@contextlib.asynccontextmanager
async def redis_errors() -> AsyncIterator[None]:
    """Report redis-py's failures inside the block as this module's errors."""
    try:
        yield
    except REDIS_DOWN as e:
        raise Unavailable(f"Redis is unavailable: {e}") from e
    except rex.ResponseError as e:
        raise refused(e) from e
