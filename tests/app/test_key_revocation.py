"""Revoking API keys never locks the admins out: a key cannot revoke itself, and the last
admin key on every model stays, even when two admins revoke each other at the same time.

The rule is checked in the one Redis script that revokes (called here directly on a real
Redis), and over HTTP against the real app."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.core.settings import Settings
from storage.auth import AuthStore
from storage.client import close, connect
from storage.errors import Conflict


def _run(redis_url: str, prefix: str, work: Any) -> Any:
    async def main() -> Any:
        clients = connect(redis_url)
        try:
            return await work(AuthStore(clients, prefix))
        finally:
            await close(clients)

    return asyncio.run(main())


def test_two_admins_revoking_each_other_at_once_leave_one(
    redis_url: str, redis_prefix: str
) -> None:
    async def work(store: AuthStore) -> tuple[list[Any], list[str]]:
        a, _ = await store.create("admin", "*", "a")
        b, _ = await store.create("admin", "*", "b")
        got = await asyncio.gather(
            store.revoke(b.id, by=a.id), store.revoke(a.id, by=b.id), return_exceptions=True
        )
        _, keys = await store.load()
        return list(got), [k.name for k in keys]

    for _ in range(20):  # each time, whichever script runs first wins
        got, left = _run(redis_url, f"{redis_prefix}-{uuid.uuid4().hex[:6]}", work)
        assert sorted(map(type, got), key=str) == sorted([bool, Conflict], key=str), got
        assert left in (["a"], ["b"])
        [refused] = [e for e in got if isinstance(e, Conflict)]
        assert "last admin key" in str(refused)


def test_the_last_admin_key_on_every_model_stays(redis_url: str, redis_prefix: str) -> None:
    async def work(store: AuthStore) -> None:
        root, _ = await store.create("admin", "*", "root")
        confined, _ = await store.create("admin", "acme-*", "acme admin")
        writer, _ = await store.create("write", "*", "writer")
        with pytest.raises(Conflict, match="last admin key on every model"):
            await store.revoke(root.id)
        assert await store.revoke(writer.id) is True
        assert await store.revoke(confined.id) is True  # it cannot manage keys anyway
        with pytest.raises(Conflict, match="cannot revoke itself"):
            await store.revoke(root.id, by=root.id)
        assert await store.revoke("no-such-key") is False
        other, _ = await store.create("admin", "*", "other")
        assert await store.revoke(root.id, by=other.id) is True
        _, keys = await store.load()
        assert [k.name for k in keys] == ["other"]

    _run(redis_url, redis_prefix, work)


@pytest.fixture
def admin_api(api_settings: Settings, server_thread: Any) -> Iterator[tuple[httpx.Client, str]]:
    """An app of its own (auth on, one admin key), a client with that key and its id."""
    settings = api_settings.model_copy(update={"key_prefix": f"t-{uuid.uuid4().hex[:12]}"})
    with server_thread(settings) as server, httpx.Client(base_url=server.url, timeout=30) as c:
        r = c.post("/v1/keys", json={"scope": "admin", "name": "root"})
        assert r.status_code == 201, r.text
        c.headers["Authorization"] = f"Bearer {r.json()['key']}"
        yield c, r.json()["id"]


def test_the_only_admin_key_cannot_revoke_itself(admin_api: tuple[httpx.Client, str]) -> None:
    c, root = admin_api
    r = c.delete(f"/v1/keys/{root}")
    assert r.status_code == 409, r.text
    assert root in r.json()["detail"]
    assert c.get("/v1/keys").status_code == 200  # still in


def test_an_admin_key_never_revokes_itself(admin_api: tuple[httpx.Client, str]) -> None:
    c, root = admin_api
    r = c.post("/v1/keys", json={"scope": "admin", "name": "second"})
    assert r.status_code == 201, r.text
    second = r.json()["id"]
    r = c.delete(f"/v1/keys/{root}")
    assert r.status_code == 409, r.text
    assert "cannot revoke itself" in r.json()["detail"]
    assert c.delete(f"/v1/keys/{second}").status_code == 204
    assert [k["id"] for k in c.get("/v1/keys").json()["keys"]] == [root]
