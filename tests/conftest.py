"""Fixtures for the whole suite: one private Redis per test session, one key prefix per test."""

from __future__ import annotations

import functools
import os
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx._transports.default as httpx_transports
import pytest

from models.warm import place_cache
from storage.server import EmbeddedRedis, RedisServerError

# the kernels compiled into the cache `./run` warms (keyed on the sources), not numba's
# default beside them, which keeps code compiled from an earlier version of a callee
place_cache()

_default_tls = functools.cache(httpx.create_ssl_context)


def _shared_tls(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
    """httpx's TLS context of a client, the default one made once: it reads the whole CA
    bundle (some 20 ms of CPU), and httpx makes one for every client, whatever its URL;
    the suite's clients, thousands of them, share it, as one context may serve any number
    of connections."""
    if verify is True and cert is None:
        return _default_tls(trust_env=trust_env)
    return httpx.create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)


httpx_transports.create_ssl_context = _shared_tls


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a Redis started for this session in a temporary directory (never :6379).

    With ``COMMITTEE_TEST_REDIS=cluster`` it is a Redis Cluster of 3 primaries and 3
    replicas instead: ``./run test`` runs the service's API tests a second time so."""
    data_dir: Path = tmp_path_factory.mktemp("redis")
    if os.environ.get("COMMITTEE_TEST_REDIS") == "cluster":
        from harness.redis_cluster import RedisCluster

        with RedisCluster(data_dir) as cluster:
            yield cluster.seed_url
        return
    try:
        server = EmbeddedRedis(data_dir).start()
    except RedisServerError as exc:
        pytest.fail(f"tests need a Redis server: {exc}", pytrace=False)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_prefix() -> str:
    """A key prefix of this test's own, so tests sharing the session's Redis never collide."""
    return f"t-{uuid.uuid4().hex}"
