"""Fixtures for the whole suite: one private Redis per test session, one key prefix per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from models.warm import place_cache
from storage.server import EmbeddedRedis, RedisServerError

# the kernels compiled into the cache `./run` warms (keyed on the sources), not numba's
# default beside them, which keeps code compiled from an earlier version of a callee
place_cache()


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
