"""The one place the Redis clients are created and closed, for each kind of topology
(:func:`storage.topology.parse_topology`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.sentinel import Sentinel

from storage.resp import Address, Connection
from storage.topology import ClusterConnection, SentinelConnection, parse_topology

__all__ = ["Clients", "close", "connect"]

Scripts = Connection | ClusterConnection | SentinelConnection


@dataclass(frozen=True, slots=True)
class Clients:
    """A redis-py client for general commands and one pipelined connection (one per
    node of a cluster) shared by the per-trial script calls."""

    redis: Any  # aioredis.Redis, or aioredis.RedisCluster: the same commands
    scripts: Scripts
    kind: str = "single"  # single | cluster | sentinel


def _tls(a: Address) -> dict[str, Any]:
    if not a.tls:
        return {}
    return {
        "ssl": True,
        "ssl_ca_certs": a.ca_certs or None,
        "ssl_certfile": a.certfile or None,
        "ssl_keyfile": a.keyfile or None,
        "ssl_cert_reqs": "required" if a.verify else "none",
        "ssl_check_hostname": a.verify and a.check_hostname,
    }


def connect(url: str, *, timeout: float = 5.0, max_connections: int = 1024) -> Clients:
    """Clients for ``url`` (redis://, rediss://, unix://, redis+cluster://,
    rediss+cluster:// or redis+sentinel://), replies as bytes.

    Each redis-py command in flight holds a pooled connection (at most
    ``max_connections`` per node; beyond that a command fails as unavailable); the
    script calls share one per node. Connections are made lazily; callers see failures
    as :class:`~storage.errors.Unavailable` from the repository.
    """
    topology = parse_topology(url)
    common: dict[str, Any] = {
        "decode_responses": False,
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
    }
    if topology.kind == "cluster":
        seed = topology.nodes[0]
        cluster = aioredis.RedisCluster(
            startup_nodes=[ClusterNode(a.host, a.port) for a in topology.nodes],
            username=seed.username or None,
            password=seed.password or None,
            max_connections=max_connections,
            **common,
            **_tls(seed),
        )
        return Clients(cluster, ClusterConnection(topology.nodes, timeout=timeout), "cluster")
    if topology.kind == "sentinel":
        sentinels = [(a.host, a.port) for a in topology.nodes]
        auth = topology.auth or topology.nodes[0]
        watch = Sentinel(sentinels, **common)
        client = watch.master_for(
            topology.master,
            username=auth.username or None,
            password=auth.password or None,
            db=auth.db,
            max_connections=max_connections,
            **common,
        )
        scripts = SentinelConnection(topology.nodes, topology.master, auth, timeout=timeout)
        return Clients(client, scripts, "sentinel")
    pool = aioredis.ConnectionPool.from_url(url, max_connections=max_connections, **common)
    return Clients(aioredis.Redis(connection_pool=pool), Connection(url, timeout=timeout))


async def close(clients: Clients) -> None:
    await clients.scripts.aclose()
    await clients.redis.aclose()
