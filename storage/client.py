"""The one place a Redis client is created and closed."""

from __future__ import annotations

import redis.asyncio as aioredis

__all__ = ["close", "connect"]


def connect(url: str, *, timeout: float = 5.0, max_connections: int = 1024) -> aioredis.Redis:
    """An asyncio client for ``url`` (redis://, rediss:// or unix://), replies as bytes.

    Each command in flight holds a connection (at most ``max_connections``; beyond that a
    command fails as unavailable). Connections are made lazily; callers see failures as
    :class:`~storage.errors.Unavailable` from the repository.
    """
    pool = aioredis.ConnectionPool.from_url(
        url,
        decode_responses=False,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        max_connections=max_connections,
    )
    return aioredis.Redis(connection_pool=pool)


async def close(client: aioredis.Redis) -> None:
    await client.aclose()
