"""Where the data lives: one Redis, a Redis Cluster, or a primary watched by Sentinel.

:func:`parse_topology` reads the service's Redis URL:

- ``redis://``, ``rediss://``, ``unix://``: one node (:func:`storage.resp.parse_url`);
- ``redis+cluster://host:port[,host:port...]`` (``rediss+cluster://`` with TLS): any seed
  nodes of a cluster, which tell the rest;
- ``redis+sentinel://host:port[,host:port...]/master-name``: sentinels, which tell where
  the primary named ``master-name`` is (``[[user]:password@]`` is the primary's).

:class:`ClusterConnection` and :class:`SentinelConnection` speak the same
:meth:`evalsha` and :meth:`together` as :class:`storage.resp.Connection`, with one
pipelined connection per node. A script's keys share one slot (its model's hash tag), so
each call goes to the node serving that slot, follows ``MOVED`` (the slot has moved: the
map is corrected and read again) and ``ASK`` (the slot is moving: this one call goes to
the new node), and retries briefly through a failover; past that it raises
:class:`~storage.errors.Unavailable`, which the service answers with 503 and
``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from redis.crc import key_slot

from storage.errors import Unavailable
from storage.resp import Address, Connection, ReplyError, parse_url, script_call

__all__ = [
    "ClusterConnection",
    "SentinelConnection",
    "Topology",
    "parse_topology",
]

SLOTS = 16384
RETRY_FOR = 2.0  # seconds a call keeps retrying through a failover before it gives up
# seconds a primary's connection may go unanswered before the sentinels are asked again
# whether it is still the primary: well under the seconds a sentinel waits before it
# declares a primary down, so a connection that answered within them missed no failover
CONFIRM_AFTER = 1.0
_BUSY = ("TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "LOADING", "READONLY")


@dataclass(frozen=True, slots=True)
class Topology:
    kind: str  # single | cluster | sentinel
    nodes: tuple[Address, ...]  # the node; the seeds; the sentinels
    master: str = ""  # the primary's name, for Sentinel
    auth: Address | None = None  # the primary's credentials and database, for Sentinel


def parse_topology(url: str) -> Topology:
    """Read a Redis URL of any of the three kinds (see the module's docstring)."""
    scheme = url.partition("://")[0]
    if scheme not in ("redis+cluster", "rediss+cluster", "redis+sentinel"):
        return Topology("single", (parse_url(url),))
    u = urlsplit(url)
    auth, _, hosts = u.netloc.rpartition("@")
    if not hosts:
        raise ValueError(f"Redis URL {url!r} names no host")
    plain = "rediss" if scheme == "rediss+cluster" else "redis"
    rest = f"?{u.query}" if u.query else ""
    nodes = []
    for host in hosts.split(","):
        one = parse_url(f"{plain}://{auth + '@' if auth else ''}{host}{rest}")
        nodes.append(one)
    if scheme == "redis+sentinel":
        master = unquote(u.path.strip("/"))
        if not master or "/" in master:
            raise ValueError(f"Redis URL {url!r}: give the primary's name as its path")
        # the password is the primary's: sentinels are asked without one
        sentinels = [dataclasses.replace(n, username="", password="", db=0) for n in nodes]
        return Topology("sentinel", tuple(sentinels), master, nodes[0])
    if u.path.strip("/") not in ("", "0"):
        raise ValueError(f"Redis URL {url!r}: a cluster has only database 0")
    return Topology("cluster", tuple(nodes))


def _redirect(e: ReplyError) -> tuple[str, int, str, int] | None:
    """``MOVED``/``ASK`` replies as (kind, slot, host, port); None for other errors."""
    parts = str(e).split()
    if len(parts) != 3 or parts[0] not in ("MOVED", "ASK"):
        return None
    host, _, port = parts[2].rpartition(":")
    return parts[0], int(parts[1]), host, int(port)


class _Routed:
    """Script calls and single commands over :meth:`together`, which sends commands back
    to back to the node serving the keys (and follows it when it changes)."""

    async def together(self, keys: list[Any], *commands: tuple[Any, ...]) -> list[Any]:
        raise NotImplementedError

    async def evalsha(self, sha: str, script: str, keys: list[Any], args: list[Any]) -> Any:
        """Run a script on the primary of its keys."""
        return (await self.script(sha, script, keys, args))[0]

    async def script(
        self,
        sha: str,
        script: str,
        keys: list[Any],
        args: list[Any],
        after: tuple[tuple[Any, ...], ...] = (),
    ) -> list[Any]:
        """As :meth:`storage.resp.Connection.script`, on the primary of the keys."""

        async def together(*commands: tuple[Any, ...]) -> list[Any]:
            return await self.together(keys, *commands)

        return await script_call(together, sha, script, keys, args, after)

    async def call(self, *args: Any) -> Any:
        """A command without keys, to a primary (``PING``, ``INFO``)."""
        reply = (await self.together([], args))[0]
        if isinstance(reply, ReplyError):
            raise reply
        return reply


class ClusterConnection(_Routed):
    """Script calls to a Redis Cluster: each to the primary of its keys' slot."""

    def __init__(self, seeds: tuple[Address, ...], *, timeout: float = 5.0) -> None:
        self.seeds = seeds
        self.timeout = timeout
        self._slots: list[Address | None] = [None] * SLOTS
        self._nodes: dict[tuple[str, int], Connection] = {}
        self._refreshing: asyncio.Future[None] | None = None
        self._refreshed = 0.0
        self._tasks: set[asyncio.Future[None]] = set()
        self._closed = False

    def _node(self, a: Address) -> Connection:
        c = self._nodes.get((a.host, a.port))
        if c is None:
            c = self._nodes[a.host, a.port] = Connection(a, timeout=self.timeout)
        return c

    def _address(self, host: str, port: int) -> Address:
        return dataclasses.replace(self.seeds[0], host=host or self.seeds[0].host, port=port)

    async def refresh(self) -> None:
        """Read the slot map again (callers at the same time share one read)."""
        if self._refreshing is None:
            self._refreshing = asyncio.ensure_future(self._refresh())
            self._refreshing.add_done_callback(self._refresh_done)
        await asyncio.shield(self._refreshing)

    def _refresh_done(self, f: asyncio.Future[None]) -> None:
        self._refreshing = None
        if not f.cancelled():
            f.exception()  # retrieved: each caller sees it from its await

    async def _refresh(self) -> None:
        known = [self._address(h, p) for h, p in self._nodes]
        candidates = list(self.seeds) + [a for a in known if a not in self.seeds]
        random.shuffle(candidates)
        errors = []
        for a in candidates:
            try:
                ranges = await self._node(a).call("CLUSTER", "SLOTS")
            except (Unavailable, ReplyError) as e:
                errors.append(f"{a.host}:{a.port}: {e}")
                continue
            slots: list[Address | None] = [None] * SLOTS
            for r in ranges:
                start, end, primary = int(r[0]), int(r[1]), r[2]
                host = primary[0].decode() if isinstance(primary[0], bytes) else str(primary[0])
                owner = self._address(host or a.host, int(primary[1]))
                slots[start : end + 1] = [owner] * (end - start + 1)
            self._slots = slots
            self._refreshed = time.monotonic()
            return
        raise Unavailable("no node of the Redis Cluster answered: " + "; ".join(errors))

    async def _owner(self, slot: int) -> Connection:
        a = self._slots[slot]
        if a is None:
            await self.refresh()
            a = self._slots[slot]
            if a is None:
                raise Unavailable(f"no node of the Redis Cluster serves slot {slot}")
        return self._node(a)

    async def together(self, keys: list[Any], *commands: tuple[Any, ...]) -> list[Any]:
        """``commands`` back to back on the primary serving ``keys``' slot, following
        redirections; their replies (see :meth:`storage.resp.Connection.together`)."""
        slot = key_slot(_bytes(keys[0])) if keys else random.randrange(SLOTS)
        deadline = time.monotonic() + RETRY_FOR
        pause = 0.02
        last = ""
        asking: Connection | None = None
        while True:
            if self._closed:
                raise Unavailable("the Redis connection is closed")
            try:
                if asking is not None:
                    replies = (await asking.together(("ASKING",), *commands))[1:]
                    asking = None
                else:
                    replies = await (await self._owner(slot)).together(*commands)
                first = replies[0]
                if not isinstance(first, ReplyError):
                    return replies
                moved = _redirect(first)
                if moved is not None:
                    kind, _, host, port = moved
                    target = self._address(host, port)
                    if kind == "ASK":
                        asking = self._node(target)
                    else:
                        self._slots[slot] = target
                        self._background(self._quiet_refresh())
                    continue
                if not str(first).startswith(_BUSY):
                    return replies
                last = str(first)
            except Unavailable as e:
                last = str(e)
            if time.monotonic() + pause > deadline:
                raise Unavailable(f"the Redis Cluster did not serve slot {slot}: {last}")
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.25)
            try:
                await self.refresh()
            except Unavailable as e:
                last = str(e)

    def _background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _quiet_refresh(self) -> None:
        with contextlib.suppress(Unavailable):
            await self.refresh()

    async def each_primary(self, *args: Any) -> list[Any]:
        """``args`` run on every primary of a freshly read slot map."""
        await self.refresh()
        out = []
        for a in self.nodes():
            reply = (await self._node(a).together(args))[0]
            if isinstance(reply, ReplyError):
                raise reply
            out.append(reply)
        return out

    def nodes(self) -> list[Address]:
        """The primaries of the slot map as last read."""
        return list(dict.fromkeys(a for a in self._slots if a is not None))

    async def aclose(self) -> None:
        self._closed = True
        for t in list(self._tasks):
            t.cancel()
        for c in list(self._nodes.values()):
            await c.aclose()


def _bytes(key: Any) -> bytes:
    return key if isinstance(key, bytes) else str(key).encode()


async def _says_primary(conn: Connection, errors: list[str]) -> bool:
    """Whether the node ``conn`` reaches answers ROLE as a primary (else why not, into
    ``errors``)."""
    a = conn.address
    try:
        role = await conn.call("ROLE")
    except (Unavailable, ReplyError) as e:
        errors.append(f"primary {a.host}:{a.port}: {e}")
        return False
    if role and role[0] == b"master":
        return True
    errors.append(f"{a.host}:{a.port} is not a primary yet")
    return False


class SentinelConnection(_Routed):
    """Script calls to the primary the sentinels name, found again after a failover.

    A :class:`~storage.resp.Connection` reopens its socket to the same address by itself,
    so a connection lost while idle (its primary killed) would be reopened to that node
    once it restarts: alone, as a primary of its own until the sentinels make it the new
    primary's replica, and a replica after. So the sentinels are asked again before a
    connection unanswered for ``CONFIRM_AFTER`` seconds is used, and before
    :meth:`each_primary` (the service's check of the primary, which must not reach a
    former one).
    """

    def __init__(
        self, sentinels: tuple[Address, ...], master: str, auth: Address, *, timeout: float = 5.0
    ) -> None:
        self.sentinels = sentinels
        self.master = master
        self.auth = auth  # the primary's credentials, database and TLS settings
        self.timeout = timeout
        self._conn: Connection | None = None
        self._answered = 0.0  # when the primary last answered on _conn (monotonic)
        self._finding: asyncio.Future[Connection] | None = None
        self._closed = False

    async def _primary(self) -> Connection:
        conn = self._conn
        if conn is not None and time.monotonic() - self._answered < CONFIRM_AFTER:
            return conn
        if self._finding is None:
            self._finding = asyncio.ensure_future(self._find(conn))
            self._finding.add_done_callback(self._found)
        return await asyncio.shield(self._finding)

    def _found(self, f: asyncio.Future[Connection]) -> None:
        self._finding = None
        if f.cancelled() or f.exception() is not None:
            self._conn = None  # _find closed it
        else:
            self._conn, self._answered = f.result(), time.monotonic()

    async def _find(self, current: Connection | None) -> Connection:
        """The primary the sentinels name now, which says it is one: ``current`` if
        it is still that primary, else a new connection (and ``current`` is closed)."""
        found: Connection | None = None
        try:
            found = await self._ask(current)
            return found
        finally:
            if current is not None and current is not found:
                await current.aclose()

    async def _ask(self, current: Connection | None) -> Connection:
        errors: list[str] = []
        for s in self.sentinels:
            probe = Connection(s, timeout=self.timeout)
            try:
                got = await probe.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master)
            except (Unavailable, ReplyError) as e:
                errors.append(f"{s.host}:{s.port}: {e}")
                continue
            finally:
                await probe.aclose()
            if not got:
                errors.append(f"{s.host}:{s.port} knows no primary {self.master!r}")
                continue
            host, port = got[0].decode(), int(got[1])
            if (
                current is not None
                and (current.address.host, current.address.port) == (host, port)
                and await _says_primary(current, errors)
            ):
                return current
            conn = Connection(
                dataclasses.replace(self.auth, host=host, port=port), timeout=self.timeout
            )
            if await _says_primary(conn, errors):
                return conn
            await conn.aclose()
        raise Unavailable(f"no primary {self.master!r} found: " + "; ".join(errors))

    async def _forget(self, conn: Connection) -> None:
        if self._conn is conn:
            self._conn = None
            await conn.aclose()

    async def together(self, keys: list[Any], *commands: tuple[Any, ...]) -> list[Any]:
        """``commands`` back to back on the primary, found again after a failover."""
        deadline = time.monotonic() + RETRY_FOR
        pause = 0.02
        last = ""
        while True:
            if self._closed:
                raise Unavailable("the Redis connection is closed")
            conn: Connection | None = None
            try:
                conn = await self._primary()
                replies = await conn.together(*commands)
                if self._conn is conn:
                    self._answered = time.monotonic()
                first = replies[0]
                if not (isinstance(first, ReplyError) and str(first).startswith(_BUSY)):
                    return replies
                last = str(first)
                await self._forget(conn)
            except Unavailable as e:
                last = str(e)
                if conn is not None:
                    await self._forget(conn)
            if time.monotonic() + pause > deadline:
                raise Unavailable(f"Redis primary {self.master!r} unavailable: {last}")
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.25)

    async def each_primary(self, *args: Any) -> list[Any]:
        """``args`` run on the primary the sentinels name now (asked afresh, as a
        cluster's slot map is read afresh for :meth:`ClusterConnection.each_primary`)."""
        self._answered = 0.0
        return [await self.call(*args)]

    async def aclose(self) -> None:
        self._closed = True
        if self._conn is not None:
            await self._conn.aclose()
            self._conn = None
