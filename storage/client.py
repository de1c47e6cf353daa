"""The one place the Redis clients are created and closed."""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis

from storage.resp import Connection

__all__ = ["Clients", "close", "connect"]


@dataclass(frozen=True, slots=True)
class Clients:
    """A redis-py client for general commands and one pipelined connection shared by
    the per-trial script calls."""

    redis: aioredis.Redis
    scripts: Connection


def connect(url: str, *, timeout: float = 5.0, max_connections: int = 1024) -> Clients:
    """Clients for ``url`` (redis://, rediss:// or unix://), replies as bytes.

    Each redis-py command in flight holds a pooled connection (at most
    ``max_connections``; beyond that a command fails as unavailable); the script calls
    share one. Connections are made lazily; callers see failures as
    :class:`~storage.errors.Unavailable` from the repository.
    """
    pool = aioredis.ConnectionPool.from_url(
        url,
        decode_responses=False,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        max_connections=max_connections,
    )
    return Clients(aioredis.Redis(connection_pool=pool), Connection(url, timeout=timeout))


async def close(clients: Clients) -> None:
    await clients.scripts.aclose()
    await clients.redis.aclose()
