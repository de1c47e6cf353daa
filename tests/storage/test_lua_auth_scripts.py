"""Each Lua script of the API keys (``storage/lua/auth``) called directly on a real Redis,
by its KEYS/ARGV contract: what a good call writes, and that a refusal writes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from _scripts import run, state, writes_nothing
from redis.crc import key_slot

from storage.auth import ApiKey, AuthStore
from storage.client import close, connect
from storage.keys import AuthKeys
from storage.scripts import AUTH_LUA, AUTH_SCRIPTS, SCRIPTS

RATE, CAP = 0.5, 5  # a bucket's refill (tokens/s) and capacity
LATER = 2**52  # a bucket's stamp beyond Redis's clock (ms): it refills nothing


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    for s in AUTH_SCRIPTS.values():  # registered once, under the SHA1 the service sends
        assert client.script_load(s.text) == s.sha
    yield client
    client.close()


@pytest.fixture
def a(redis_prefix: str) -> AuthKeys:
    return AuthKeys(redis_prefix)


def call(r: redis.Redis, name: str, keys: list[str], args: list[Any]) -> Any:
    return run(r, AUTH_SCRIPTS[name], keys, args)


def unwritten(r: redis.Redis, prefix: str, name: str, keys: list[str], args: list[Any]) -> Any:
    """The reply of a call that must write nothing (a refusal, or a read)."""
    return writes_nothing(r, prefix, AUTH_SCRIPTS[name], keys, args)


def record(scope: str, models: str = "*") -> bytes:
    """A key's record as :class:`~storage.auth.AuthStore` stores it."""
    return ApiKey("-", "0" * 64, scope, models, "", 1, {}).encode()


def put(r: redis.Redis, a: AuthKeys, key_id: str, raw: bytes) -> int:
    got: int = call(r, "PUT", [a.version, a.table], [key_id, raw])
    return got


def test_every_auth_script_file_is_loaded_with_its_header() -> None:
    files = sorted(f.stem.upper() for f in AUTH_LUA.glob("*.lua"))
    assert files == ["LOAD", "PUT", "RELEASE", "RESERVE", "REVOKE", "TAKE"]
    assert sorted(AUTH_SCRIPTS) == files and not set(files) & set(SCRIPTS)
    for name, s in AUTH_SCRIPTS.items():
        body = (AUTH_LUA / f"{name.lower()}.lua").read_text()
        lines = body.splitlines()
        assert lines[0] == "-- prelude: none" and s.preludes == ()
        assert lines[1].startswith(f"-- {name}: ") and s.text.endswith(body)
        assert any(line.startswith("-- KEYS: ") for line in lines)
        assert any(line.startswith("-- Reply: ") for line in lines)


def test_the_keys_of_each_call_share_one_slot(a: AuthKeys) -> None:
    # KEYS as storage.auth passes them: LOAD, PUT and REVOKE; RESERVE and RELEASE
    for keys in ([a.version, a.table], [a.owners, a.owned("k1")]):
        assert {key_slot(k.encode()) for k in keys} == {key_slot(a.audit.encode())}
    # TAKE: the one key's buckets, a slot of their own
    assert a.bucket("k1").endswith(":{rate:k1}")


def test_put(r: redis.Redis, a: AuthKeys) -> None:
    assert put(r, a, "k1", record("write")) == 1
    assert r.hgetall(a.table) == {b"k1": record("write")} and r.get(a.version) == b"1"
    # the same id again: the record replaced, the version bumped all the same
    assert put(r, a, "k1", record("read")) == 2
    assert r.hgetall(a.table) == {b"k1": record("read")} and r.get(a.version) == b"2"


def test_load_reads_and_writes_nothing(r: redis.Redis, redis_prefix: str, a: AuthKeys) -> None:
    keys = [a.version, a.table]
    assert unwritten(r, redis_prefix, "LOAD", keys, []) == [b"", []]
    put(r, a, "k1", record("admin"))
    put(r, a, "k2", record("read", "team-*"))
    version, flat = unwritten(r, redis_prefix, "LOAD", keys, [])
    assert version == b"2"
    assert dict(zip(flat[::2], flat[1::2], strict=True)) == {
        b"k1": record("admin"),
        b"k2": record("read", "team-*"),
    }


def test_revoke(r: redis.Redis, redis_prefix: str, a: AuthKeys) -> None:
    keys = [a.version, a.table]
    put(r, a, "root", record("admin"))
    put(r, a, "w", record("write"))
    put(r, a, "team", record("admin", "team-*"))  # an admin, but not on every model
    put(r, a, "junk", b"not json")  # no admin, and no error
    assert unwritten(r, redis_prefix, "REVOKE", keys, ["ghost"]) == b"none"
    # the last admin key on every model stays
    assert unwritten(r, redis_prefix, "REVOKE", keys, ["root"]) == b"last admin"
    assert call(r, "REVOKE", keys, ["w"]) == b"revoked"
    assert r.get(a.version) == b"5" and b"w" not in r.hkeys(a.table)
    assert call(r, "REVOKE", keys, ["junk"]) == b"revoked"
    assert call(r, "REVOKE", keys, ["team"]) == b"revoked"
    assert r.hkeys(a.table) == [b"root"] and r.get(a.version) == b"7"
    # with another admin on every model, either may go, but not both
    put(r, a, "root2", record("admin"))
    assert call(r, "REVOKE", keys, ["root"]) == b"revoked"
    assert unwritten(r, redis_prefix, "REVOKE", keys, ["root2"]) == b"last admin"
    assert r.hgetall(a.table) == {b"root2": record("admin")} and r.get(a.version) == b"9"


def test_reserve(r: redis.Redis, redis_prefix: str, a: AuthKeys) -> None:
    def reserve(model: str, key_id: str, most: int) -> Any:
        return call(r, "RESERVE", [a.owners, a.owned(key_id)], [model, key_id, most])

    def refused(model: str, key_id: str, most: int) -> Any:
        args = [model, key_id, most]
        return unwritten(r, redis_prefix, "RESERVE", [a.owners, a.owned(key_id)], args)

    assert reserve("m1", "k1", 2) == b"new"
    assert r.hgetall(a.owners) == {b"m1": b"k1"} and r.smembers(a.owned("k1")) == {b"m1"}
    # owned already, by this key (a retried create) or another: not counted again
    assert refused("m1", "k1", 2) == b"owned"
    assert refused("m1", "k2", 2) == b"owned"
    assert reserve("m2", "k1", 2) == b"new"
    assert refused("m3", "k1", 2) == b"full"
    assert refused("m3", "k2", 0) == b"full"
    assert r.hgetall(a.owners) == {b"m1": b"k1", b"m2": b"k1"}
    assert r.smembers(a.owned("k1")) == {b"m1", b"m2"} and not r.exists(a.owned("k2"))


def test_release(r: redis.Redis, redis_prefix: str, a: AuthKeys) -> None:
    def release(model: str, owner: str) -> Any:
        return call(r, "RELEASE", [a.owners, a.owned(owner)], [model, owner])

    def refused(model: str, owner: str) -> Any:
        keys = [a.owners, a.owned(owner)]
        return unwritten(r, redis_prefix, "RELEASE", keys, [model, owner])

    keys = [a.owners, a.owned("k1")]
    assert call(r, "RESERVE", keys, ["m1", "k1", 1]) == b"new"
    assert call(r, "RESERVE", keys, ["m2", "k1", 1]) == b"full"
    # another owner by then, or none
    assert refused("m1", "k2") == 0
    assert refused("m9", "k1") == 0
    assert release("m1", "k1") == 1
    assert not r.exists(a.owners, a.owned("k1"))
    # the key may make another model
    assert call(r, "RESERVE", keys, ["m2", "k1", 1]) == b"new"


def test_take(r: redis.Redis, redis_prefix: str, a: AuthKeys) -> None:
    key = a.bucket("k1")
    (t0, _) = r.time()
    assert call(r, "TAKE", [key], ["req", RATE, CAP, 3, 1]) == [b"3", b"2", b"0"]
    (t1, _) = r.time()
    got = r.hgetall(key)
    assert set(got) == {b"req:n", b"req:at"} and got[b"req:n"] == b"2"
    assert t0 * 1000 <= int(got[b"req:at"]) <= (t1 + 1) * 1000
    # expires a second after an empty bucket would be full again
    assert 0 < r.pttl(key) <= CAP / RATE * 1000 + 1000
    # another bucket of the same key: its own fields, full at first
    assert call(r, "TAKE", [key], ["trials", RATE, CAP, 9, 1]) == [b"5", b"0", b"0"]
    assert r.hmget(key, "req:n", "trials:n") == [b"2", b"0"]


def test_take_gives_what_is_there(r: redis.Redis, a: AuthKeys) -> None:
    key = a.bucket("k1")
    # stamped beyond Redis's clock: nothing refilled, so the counts are exact
    r.hset(key, mapping={"req:n": "2.5", "req:at": LATER})
    assert call(r, "TAKE", [key], ["req", RATE, CAP, 5, 1]) == [b"2", b"0.5", b"0"]
    # refilled up to the capacity, not beyond
    r.hset(key, mapping={"req:n": "0", "req:at": 1})
    assert call(r, "TAKE", [key], ["req", RATE, CAP, 1, 1]) == [b"1", b"4", b"0"]


def test_a_refused_take_takes_nothing(r: redis.Redis, redis_prefix: str, a: AuthKeys) -> None:
    key = a.bucket("k1")
    r.hset(key, mapping={"req:n": "0.5", "req:at": LATER, "trials:n": "3", "trials:at": 7})
    r.set(a.version, 4)
    before = state(r, redis_prefix)
    # fewer than needed: none granted, the wait until 2 are there (1.5 tokens at 0.5/s)
    assert call(r, "TAKE", [key], ["req", RATE, CAP, 2, 2]) == [b"0", b"0.5", b"3000"]
    after = state(r, redis_prefix)
    # the bucket is only stamped with its (refilled) count: no other bucket nor key written
    assert {k: v for k, v in after.items() if k != key.encode()} == {
        k: v for k, v in before.items() if k != key.encode()
    }
    got = r.hgetall(key)
    assert got[b"req:n"] == b"0.5" and int(got[b"req:at"]) < LATER
    assert (got[b"trials:n"], got[b"trials:at"]) == (b"3", b"7") and len(got) == 4


@pytest.mark.anyio
async def test_the_store_sends_a_script_redis_does_not_know(
    r: redis.Redis, redis_url: str, redis_prefix: str
) -> None:
    r.script_flush()  # EVALSHA is refused (NOSCRIPT): the store sends the file (EVAL)
    clients = connect(redis_url)
    try:
        store = AuthStore(clients, redis_prefix)
        key, _ = await store.create("admin", "*", "root")
        assert await store.load() == (1, [key])
        assert (await store.take(key.id, "req", RATE, CAP, 1, 1)).granted == 1
    finally:
        await close(clients)
    shas = [AUTH_SCRIPTS[n].sha for n in ("PUT", "LOAD", "TAKE", "REVOKE")]
    assert r.script_exists(*shas) == [True, True, True, False]
