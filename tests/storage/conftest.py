"""Fixtures of the storage tests: the session's Redis through the repository."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from storage.client import close, connect
from storage.repository import ModelStore


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def store(redis_url: str, redis_prefix: str) -> AsyncIterator[ModelStore]:
    client = connect(redis_url)
    yield ModelStore(client, redis_prefix)
    await close(client)
