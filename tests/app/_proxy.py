"""A TCP proxy between the service and Redis that misbehaves on demand.

:class:`Proxy` runs an asyncio server in a thread of its own and forwards every
connection to its target (which may change: a Redis restarted on another port). What it
does to the replies coming back is set at any time with :meth:`Proxy.fault`:

``pass``
    forward as they come;
``delay``
    hold each reply back ``delay`` seconds (a latency spike);
``drop``
    with probability ``rate`` per reply chunk, swallow the chunk and close both sides: the
    command reached Redis and ran, its answer never arrives;
``half-open``
    with probability ``rate`` per chunk, stop forwarding in one direction (replies, or
    the commands that follow) and close nothing: the peer waits on a live socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import threading
import time
from collections import Counter
from concurrent.futures import Future
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from storage.server import PID_NAME, EmbeddedRedis

__all__ = ["ProxiedRedis", "Proxy"]

CHUNK = 65_536
MODES = ("pass", "delay", "drop", "half-open")


class Proxy:
    """A misbehaving TCP proxy on ``127.0.0.1:<port>`` in front of ``target``."""

    def __init__(self, target: tuple[str, int], seed: int = 0) -> None:
        self.target = target
        self.mode = "pass"
        self.delay = 0.0
        self.rate = 0.0
        self.rng = random.Random(seed)
        self.events: Counter[str] = Counter()  # what the proxy did: dropped, stalled...
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Proxy:
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._link, "127.0.0.1", 0))
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self.reset()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def fault(self, mode: str, *, rate: float = 1.0, delay: float = 0.0) -> None:
        """What to do to traffic from now on (see the module docstring)."""
        assert mode in MODES, mode
        self.mode, self.rate, self.delay = mode, rate, delay

    def reset(self) -> None:
        """Close every connection through the proxy (a stalled one included)."""

        async def close_all() -> None:
            for w in list(self._links):
                w.transport.abort()

        self._call(close_all())

    def _call(self, coro: Any) -> Any:
        f: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return f.result(10)

    async def _link(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            redis_r, redis_w = await asyncio.open_connection(*self.target)
        except OSError:  # Redis is down: so is the connection
            client_w.transport.abort()
            return
        self._links |= {client_w, redis_w}
        stalled = {"up": False, "down": False}
        try:
            await asyncio.gather(
                self._pump(client_r, redis_w, "up", stalled, (client_w, redis_w)),
                self._pump(redis_r, client_w, "down", stalled, (client_w, redis_w)),
            )
        finally:
            for w in (client_w, redis_w):
                self._links.discard(w)
                w.transport.abort()

    def _hit(self) -> bool:
        return self.rng.random() < self.rate

    async def _pump(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        way: str,
        stalled: dict[str, bool],
        both: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        """Copy ``src`` to ``dst`` (``way`` is up: to Redis, down: to the service)."""
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while chunk := await src.read(CHUNK):
                mode = self.mode
                if way == "down" and mode == "delay":
                    self.events["delayed"] += 1
                    await asyncio.sleep(self.delay)
                elif way == "down" and mode == "drop" and self._hit():
                    self.events["dropped"] += 1
                    for w in both:
                        w.transport.abort()
                    return
                elif mode == "half-open" and not any(stalled.values()) and self._hit():
                    stalled[self.rng.choice(("up", "down"))] = True
                    self.events["stalled"] += 1
                if stalled[way]:
                    continue  # swallowed: the connection stays open, silent one way
                dst.write(chunk)
                await dst.drain()
        # one side closed: close the other (a stalled link stays half-open until then)
        for w in both:
            w.transport.abort()


class ProxiedRedis:
    """A Redis of a test's own, on a TCP port, with its append-only file, behind a
    :class:`Proxy`. The service is given :attr:`url` (the proxy's), which stays the same
    when Redis is killed and started again on another port; :attr:`direct_url` bypasses
    the proxy, for the test's own reads."""

    def __init__(self, data_dir: Path) -> None:
        # a socket path too long for a unix socket makes EmbeddedRedis listen on TCP;
        # fsync before each reply: a SIGKILLed Redis keeps every write it acknowledged
        self.server = EmbeddedRedis(data_dir / ("redis-" + "x" * 100), appendfsync="always")
        self.proxy: Proxy | None = None

    @property
    def url(self) -> str:
        assert self.proxy is not None
        return self.proxy.url

    @property
    def direct_url(self) -> str:
        return self.server.url

    def _target(self) -> tuple[str, int]:
        u = urlsplit(self.server.url)
        assert u.scheme == "redis" and u.hostname and u.port, self.server.url
        return u.hostname, u.port

    def start(self) -> ProxiedRedis:
        self.server.start()
        self.proxy = Proxy(self._target()).start()
        return self

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
        self.server.stop()

    def kill(self) -> None:
        """SIGKILL redis-server (no shutdown, no final flush), then start it again on
        its append-only file."""
        pid = int((self.server.data_dir / PID_NAME).read_text())
        os.kill(pid, signal.SIGKILL)
        while self.server.running:
            time.sleep(0.01)
        self._again()

    def restart(self, down: float = 0.0) -> None:
        """SHUTDOWN, stay down ``down`` seconds, start again."""
        self.server.stop()
        time.sleep(down)
        self._again()

    def _again(self) -> None:
        assert self.proxy is not None
        self.server.start()
        self.proxy.target = self._target()
        self.proxy.reset()  # links to the old server are dead: close them now

    def __enter__(self) -> ProxiedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
