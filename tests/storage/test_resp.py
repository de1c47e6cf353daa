"""The pipelined connection against a real Redis: ordering, errors, scripts, loss, timeouts."""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.errors import Unavailable
from storage.resp import Address, Connection, ReplyError, parse_url
from storage.server import EmbeddedRedis

pytestmark = pytest.mark.anyio

# holds Redis for ARGV[1] seconds, as a hung server would
BUSY = """
local t = redis.call('TIME')
local stop = t[1] * 1e6 + t[2] + ARGV[1] * 1e6
repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] >= stop
return 1
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def conn(redis_url: str) -> AsyncIterator[Connection]:
    c = Connection(redis_url, timeout=5.0)
    yield c
    await c.aclose()


async def test_concurrent_calls_get_their_own_replies(conn: Connection, redis_prefix: str) -> None:
    keys = [f"{redis_prefix}:{i}" for i in range(1000)]
    incr = await asyncio.gather(*(conn.call("INCRBY", k, i) for i, k in enumerate(keys)))
    got = await asyncio.gather(*(conn.call("GET", k) for k in keys))
    assert incr == list(range(1000))
    assert got == [str(i).encode() for i in range(1000)]
    assert await conn.call("GET", f"{redis_prefix}:none") is None
    assert await conn.call("MGET", keys[1], keys[2]) == [b"1", b"2"]


async def test_error_replies_raise_and_keep_the_stream_in_step(
    conn: Connection, redis_prefix: str
) -> None:
    await conn.call("SET", f"{redis_prefix}:text", "not a number")

    async def one(i: int) -> object:
        try:
            if i % 3 == 0:
                return await conn.call("INCR", f"{redis_prefix}:text")
            return await conn.call("ECHO", i)
        except ReplyError as e:
            return e

    got = await asyncio.gather(*(one(i) for i in range(600)))
    for i, g in enumerate(got):
        if i % 3 == 0:
            assert isinstance(g, ReplyError) and "not an integer" in str(g)
        else:
            assert g == str(i).encode()
    with pytest.raises(ReplyError, match="unknown command"):
        await conn.call("NOSUCHCOMMAND")
    with pytest.raises(TypeError):
        await conn.call("ECHO", None)  # never sent
    assert await conn.call("ECHO", "still in step") == b"still in step"


async def test_a_caller_giving_up_leaves_the_others_in_step(
    conn: Connection, redis_prefix: str
) -> None:
    slow = asyncio.ensure_future(conn.call("EVAL", BUSY, 0, 0.2))
    after = asyncio.ensure_future(conn.call("ECHO", "after"))
    await asyncio.sleep(0.05)
    slow.cancel()
    assert await after == b"after"
    assert await conn.call("ECHO", "next") == b"next"


async def test_scripts_are_loaded_again_after_a_flush(conn: Connection, redis_prefix: str) -> None:
    script = "return {KEYS[1], ARGV[1], tonumber(ARGV[2]) + 1}"
    sha = hashlib.sha1(script.encode()).hexdigest()
    key = f"{redis_prefix}:k"
    for _ in range(2):
        await conn.call("SCRIPT", "FLUSH")
        got = await asyncio.gather(
            *(conn.evalsha(sha, script, [key], [b"v", i]) for i in range(50))
        )
        assert got == [[key.encode(), b"v", i + 1] for i in range(50)]
    with pytest.raises(ReplyError, match="attempt to perform arithmetic"):
        await conn.evalsha(sha, script, [key], ["v", "x"])


async def test_big_values_go_both_ways(conn: Connection, redis_prefix: str) -> None:
    big = bytes(range(256)) * (20 * 4096)  # 20 MiB
    key = f"{redis_prefix}:big"
    assert await conn.call("SET", key, big) == b"OK"
    got, length = await asyncio.gather(conn.call("GET", key), conn.call("STRLEN", key))
    assert got == big and length == len(big)
    assert await conn.call("SET", key, "é") == b"OK"
    assert await conn.call("GET", key) == "é".encode()


async def test_a_lost_server_fails_pending_and_new_calls_until_it_is_back(
    tmp_path: Path, redis_prefix: str
) -> None:
    server = EmbeddedRedis(tmp_path).start()
    c = Connection(server.url, timeout=5.0)
    try:
        assert await c.call("SET", "k", "v") == b"OK"
        # BLPOP holds the connection: the GET behind it is pending too
        pending = [asyncio.ensure_future(c.call("BLPOP", "empty", 0)) for _ in range(3)]
        pending.append(asyncio.ensure_future(c.call("GET", "k")))
        await asyncio.sleep(0.05)
        await asyncio.to_thread(server.stop)
        for p in pending:
            with pytest.raises(Unavailable):
                await p
        with pytest.raises(Unavailable, match="cannot connect"):
            await c.call("GET", "k")
        server.start()
        assert await c.call("GET", "k") == b"v"  # the append-only file kept it
    finally:
        await c.aclose()
        server.stop()


async def test_a_silent_server_times_out_and_the_next_call_works(redis_url: str) -> None:
    c = Connection(redis_url, timeout=0.3)
    try:
        await c.call("PING")
        started = time.monotonic()
        calls = [c.call("EVAL", BUSY, 0, 1), c.call("PING"), c.call("PING")]
        got = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(g, Unavailable) for g in got), got
        assert time.monotonic() - started < 0.9
        await asyncio.sleep(1.0)  # the script ends
        assert await c.call("PING") == b"PONG"
    finally:
        await c.aclose()


async def test_closing_fails_pending_calls_and_later_ones(redis_url: str) -> None:
    c = Connection(redis_url)
    pending = asyncio.ensure_future(c.call("BLPOP", f"empty-{uuid.uuid4().hex}", 0))
    await asyncio.sleep(0.05)
    await c.aclose()
    with pytest.raises(Unavailable):
        await pending
    with pytest.raises(Unavailable):
        await c.call("PING")


async def test_auth_and_select_from_the_url(redis_url: str, redis_prefix: str) -> None:
    admin = Connection(redis_url)
    user, key = f"u-{uuid.uuid4().hex}", f"{redis_prefix}:db"
    await admin.call("ACL", "SETUSER", user, "on", ">p@ss word", "~*", "+@all")
    path = parse_url(redis_url).path
    if not path:
        pytest.fail("the session's Redis is expected on a unix socket")
    try:
        c = Connection(f"unix://{user}:p%40ss%20word@{path}?db=3")
        assert await c.call("SET", key, "in 3") == b"OK"
        await c.aclose()
        assert await admin.call("GET", key) is None
        await admin.call("SELECT", 3)
        assert await admin.call("GETDEL", key) == b"in 3"
        wrong = Connection(f"unix://{user}:nope@{path}")
        with pytest.raises(Unavailable, match="WRONGPASS"):
            await wrong.call("PING")
        await wrong.aclose()
    finally:
        await admin.call("ACL", "DELUSER", user)
        await admin.aclose()


def test_urls() -> None:
    assert parse_url("redis://h:7000/2") == Address(host="h", port=7000, db=2)
    assert parse_url("redis://:secret@h") == Address(host="h", password="secret")
    assert parse_url("rediss://u:p%2Fq@h:1/0?ssl_cert_reqs=none") == Address(
        host="h", port=1, username="u", password="p/q", tls=True, verify=False
    )
    assert parse_url("unix:///tmp/r.sock?db=5") == Address(path="/tmp/r.sock", db=5)
    assert parse_url("unix://:pw@/tmp/r.sock") == Address(path="/tmp/r.sock", password="pw")
    with pytest.raises(ValueError, match="must start with"):
        parse_url("http://h")
    with pytest.raises(ValueError, match="database must be a number"):
        parse_url("redis://h/x")
    with pytest.raises(ValueError, match="no socket path"):
        parse_url("unix://")
