"""Fixtures for the whole suite: one private Redis per test session, one key prefix per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.server import EmbeddedRedis, RedisServerError


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a Redis started for this session in a temporary directory (never :6379)."""
    data_dir: Path = tmp_path_factory.mktemp("redis")
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
