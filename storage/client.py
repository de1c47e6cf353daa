"""The one place a Redis client is created and closed."""

from __future__ import annotations

import redis.asyncio as aioredis

__all__ = ["close", "connect"]


def connect(url: str, *, timeout: float = 5.0, max_connections: int = 64) -> aioredis.Redis:
    """An asyncio client for ``url`` (redis://, rediss:// or unix://), replies as bytes.

    At most ``max_connections`` are open; further commands wait for one. Connections are
    made lazily; callers see failures as
    :class:`~storage.errors.Unavailable` from the repository.
    """
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        decode_responses=False,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        health_check_interval=30,
        max_connections=max_connections,
        timeout=timeout,
    )
    return aioredis.Redis(connection_pool=pool)


async def close(client: aioredis.Redis) -> None:
    await client.aclose()
