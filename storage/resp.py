"""One pipelined Redis connection shared by every command of a process.

Commands do not wait for earlier replies: those sent in one turn of the event loop go out
in one write, and as Redis answers in order, replies resolve a queue of futures first-in
first-out. A single timer watches the queue: when commands are pending and Redis has sent
nothing for ``timeout`` seconds, the connection is dropped. Whatever is pending when the
connection goes fails as :class:`~storage.errors.Unavailable`, and the next command
connects again.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

from hiredis import Reader, pack_command

from storage.errors import StorageError, Unavailable

__all__ = ["Address", "Connection", "ReplyError", "parse_url", "script_call"]

_MORE = object()  # what the reader returns while a reply is incomplete


class ReplyError(StorageError):
    """Redis answered a command with an error (``ERR ...``, ``NOSCRIPT ...``)."""


@dataclass(frozen=True, slots=True)
class Address:
    host: str = "localhost"
    port: int = 6379
    path: str = ""  # a unix socket, instead of host and port
    db: int = 0
    username: str = ""
    password: str = ""
    tls: bool = False
    verify: bool = True
    check_hostname: bool = True
    ca_certs: str = ""  # a CA bundle to trust instead of the system's
    certfile: str = ""  # a client certificate (PEM), for a Redis that asks for one
    keyfile: str = ""  # its private key, when not in certfile


# what a URL's query may set: ours, and redis-py's (which the other client reads)
_TLS_OPTIONS = (
    "ssl_ca_certs",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_cert_reqs",
    "ssl_check_hostname",
)
_REDIS_PY_OPTIONS = (
    "db",
    "socket_timeout",
    "socket_connect_timeout",
    "socket_keepalive",
    "health_check_interval",
    "max_connections",
    "protocol",
)


def parse_url(url: str) -> Address:
    """``redis://[[user]:password@]host[:port][/db]``, ``rediss://...`` (TLS) or
    ``unix://[[user]:password@]/path[?db=n]``.

    A ``rediss://`` URL may set ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``,
    ``ssl_cert_reqs`` (``none`` skips verification) and ``ssl_check_hostname``, as
    redis-py reads them, so one URL serves both clients; an unknown option is an error.
    """
    u = urlsplit(url)
    if u.scheme not in ("redis", "rediss", "unix"):
        raise ValueError(f"Redis URL must start with redis://, rediss:// or unix://, not {url!r}")
    query = {k: v[-1] for k, v in parse_qs(u.query).items()}
    for option in query:
        if option not in _TLS_OPTIONS + _REDIS_PY_OPTIONS:
            known = ", ".join(_TLS_OPTIONS + _REDIS_PY_OPTIONS)
            raise ValueError(f"Redis URL {url!r}: unknown option {option!r} (known: {known})")
    if u.scheme != "rediss" and any(o in query for o in _TLS_OPTIONS):
        raise ValueError(f"Redis URL {url!r}: ssl_* options need a rediss:// URL")
    reqs = query.get("ssl_cert_reqs", "required")
    if reqs not in ("none", "optional", "required"):
        raise ValueError(f"Redis URL {url!r}: ssl_cert_reqs must be none, optional or required")
    check = query.get("ssl_check_hostname", "true").lower()
    if check not in ("true", "false", "1", "0", "yes", "no"):
        raise ValueError(f"Redis URL {url!r}: ssl_check_hostname must be true or false")
    db = query.get("db") or (u.path.strip("/") if u.scheme != "unix" else "") or "0"
    if not db.isdigit():
        raise ValueError(f"Redis URL {url!r}: database must be a number, not {db!r}")
    user, password = unquote(u.username or ""), unquote(u.password or "")
    if u.scheme == "unix":
        if not u.path:
            raise ValueError(f"Redis URL {url!r} names no socket path")
        return Address(path=unquote(u.path), db=int(db), username=user, password=password)
    return Address(
        host=u.hostname or "localhost",
        port=u.port or 6379,
        db=int(db),
        username=user,
        password=password,
        tls=u.scheme == "rediss",
        verify=reqs != "none",
        check_hostname=check in ("true", "1", "yes"),
        ca_certs=query.get("ssl_ca_certs", ""),
        certfile=query.get("ssl_certfile", ""),
        keyfile=query.get("ssl_keyfile", ""),
    )


def _tls_context(a: Address) -> ssl.SSLContext:
    """Verify the server against the system's CAs or ``ca_certs``; present ``certfile``
    when given. Bad files raise ``OSError`` (an ``ssl.SSLError`` is one)."""
    tls = ssl.create_default_context(cafile=a.ca_certs or None)
    if a.certfile:
        tls.load_cert_chain(a.certfile, a.keyfile or None)
    if not a.verify:
        tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
    elif not a.check_hostname:
        tls.check_hostname = False
    return tls


class _Protocol(asyncio.Protocol):
    """One socket: the futures awaiting its replies, oldest first, and their watchdog."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self.loop = loop
        self.timeout = timeout
        self.pending: deque[asyncio.Future[Any]] = deque()
        self.reader = Reader(replyError=ReplyError, notEnoughData=_MORE)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.heard = 0.0  # when Redis last sent anything, or the queue last became non-empty
        self.timer: asyncio.TimerHandle | None = None
        self.out: list[bytes] = []  # packed commands for the next write

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def send(self, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        packed = pack_command(args)
        fut = self.loop.create_future()
        if self.closed:
            fut.set_exception(Unavailable("lost the connection to Redis"))
            return fut
        if not self.pending:
            self.heard = self.loop.time()
            if self.timer is None:
                self.timer = self.loop.call_at(self.heard + self.timeout, self._watch)
        if not self.out:
            self.loop.call_soon(self._flush)
        self.out.append(packed)
        self.pending.append(fut)
        return fut

    def _flush(self) -> None:
        out, self.out = self.out, []
        if out and not self.closed and self.transport is not None:
            self.transport.write(b"".join(out))

    def data_received(self, data: bytes) -> None:
        self.heard = self.loop.time()
        reader, pending = self.reader, self.pending
        reader.feed(data)
        try:
            while (reply := reader.gets()) is not _MORE:
                fut = pending.popleft()
                if not fut.done():  # a caller that gave up (cancelled) leaves its reply
                    fut.set_result(reply)
        except Exception as e:  # a malformed reply, or one nobody asked for
            self.fail(f"Redis sent what cannot be read ({e!r})")

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(f"lost the connection to Redis ({exc or 'closed by the server'})")

    def _watch(self) -> None:
        self.timer = None
        if self.closed or not self.pending:
            return
        if self.loop.time() - self.heard >= self.timeout:
            self.fail(f"Redis did not answer within {self.timeout:g} s")
        else:
            self.timer = self.loop.call_at(self.heard + self.timeout, self._watch)

    def fail(self, why: str) -> None:
        """Fail whatever is pending and drop the socket (once)."""
        if self.closed:
            return
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
        pending, self.pending = self.pending, deque()
        for fut in pending:
            if not fut.done():
                fut.set_exception(Unavailable(why))
        if self.transport is not None:
            self.transport.abort()


async def script_call(
    together: Any,
    sha: str,
    script: str,
    keys: list[Any],
    args: list[Any],
    after: tuple[tuple[Any, ...], ...],
) -> list[Any]:
    """EVALSHA and ``after`` through ``together``; EVAL (which caches the script) when the
    server does not know the SHA1. Raises the script's error reply."""
    replies = await together(("EVALSHA", sha, len(keys), *keys, *args), *after)
    first = replies[0]
    if type(first) is ReplyError and str(first).startswith("NOSCRIPT"):
        replies = await together(("EVAL", script, len(keys), *keys, *args), *after)
        first = replies[0]
    if type(first) is ReplyError:
        raise first
    return list(replies)


class Connection:
    """A lazily opened, pipelined connection to the Redis at ``url``; replies as bytes.

    Error replies raise :class:`ReplyError`; an unreachable or silent Redis raises
    :class:`~storage.errors.Unavailable`. Blocking commands (BLPOP, SUBSCRIBE) would stall
    every caller behind them: they do not belong here. For one event loop; not thread-safe.
    """

    def __init__(self, url: str | Address, *, timeout: float = 5.0) -> None:
        self.address = url if isinstance(url, Address) else parse_url(url)
        self.timeout = timeout
        self._proto: _Protocol | None = None
        self._opening: asyncio.Future[_Protocol] | None = None
        self._closed = False

    async def call(self, *args: Any) -> Any:
        """Send one command and return its reply."""
        return await self._call(args)

    async def evalsha(self, sha: str, script: str, keys: list[Any], args: list[Any]) -> Any:
        """Run a Lua script by its SHA1, sending it whole if Redis does not know it."""
        return (await self.script(sha, script, keys, args))[0]

    async def script(
        self,
        sha: str,
        script: str,
        keys: list[Any],
        args: list[Any],
        after: tuple[tuple[Any, ...], ...] = (),
    ) -> list[Any]:
        """Run a Lua script and then ``after`` back to back (``WAIT``: the script's
        writes reached a replica); the replies, the script's raised if an error."""
        return await script_call(self.together, sha, script, keys, args, after)

    async def each_primary(self, *args: Any) -> list[Any]:
        """``args`` run on every primary: here, the one node."""
        return [await self.call(*args)]

    async def together(self, *commands: tuple[Any, ...]) -> list[Any]:
        """Send ``commands`` back to back on this connection (nothing else between them:
        ``ASKING`` before a command, ``WAIT`` after a write) and return their replies,
        error replies as :class:`ReplyError` values rather than raised."""
        p = self._proto
        if p is None or p.closed:
            p = await self._connect()
        futures = [p.send(c) for c in commands]
        return [await f for f in futures]

    async def _call(self, args: tuple[Any, ...]) -> Any:
        p = self._proto
        if p is None or p.closed:
            p = await self._connect()
        reply = await p.send(args)
        if type(reply) is ReplyError:
            raise reply
        return reply

    async def _connect(self) -> _Protocol:
        if self._closed:
            raise Unavailable("the Redis connection is closed")
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._open())
            self._opening.add_done_callback(self._opened)
        try:
            return await asyncio.shield(self._opening)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._closed and task is not None and not task.cancelling():
                raise Unavailable("the Redis connection is closed") from None
            raise

    def _opened(self, f: asyncio.Future[_Protocol]) -> None:
        self._opening = None
        if not f.cancelled() and f.exception() is None:
            self._proto = f.result()

    async def _open(self) -> _Protocol:
        a, loop = self.address, asyncio.get_running_loop()
        p, ok = _Protocol(loop, self.timeout), False
        try:
            async with asyncio.timeout(self.timeout):
                if a.path:
                    await loop.create_unix_connection(lambda: p, a.path)
                else:
                    tls = _tls_context(a) if a.tls else None
                    await loop.create_connection(lambda: p, a.host, a.port, ssl=tls)
                hello = []
                if a.password:
                    auth = (a.username, a.password) if a.username else (a.password,)
                    hello.append(p.send(("AUTH", *auth)))
                if a.db:
                    hello.append(p.send(("SELECT", a.db)))
                for reply in await asyncio.gather(*hello):
                    if type(reply) is ReplyError:
                        raise reply
            ok = True
        except (OSError, TimeoutError, ReplyError) as e:
            where = a.path or f"{a.host}:{a.port}"
            raise Unavailable(f"cannot connect to Redis at {where}: {e!r}") from e
        finally:
            if not ok:
                p.fail("could not connect")
        return p

    async def aclose(self) -> None:
        """Fail pending commands and close the socket; later calls raise Unavailable."""
        self._closed = True
        if self._opening is not None:
            self._opening.cancel()
        if self._proto is not None:
            self._proto.fail("the Redis connection was closed")
            self._proto = None
