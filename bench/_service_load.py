"""The load generator of ``bench/service.py``: closed-loop HTTP/1.1 clients in one process.

:func:`run` executes one :class:`Plan` (a path, request bodies, how many clients, for how
long) and returns a :class:`Result`: the requests completed inside the timed window after
the warm-up, their p50 / p99 latency, and the CPU seconds this process and the watched
server processes spent in that window. ``bench/service.py`` runs it in a process of its
own, so it never shares a GIL with a server.

Two clients, chosen per plan:

``raw``
    one asyncio stream per connection on uvloop, keep-alive, pre-built request bytes; it
    reads the status line and headers, then exactly ``content-length`` body bytes.
``httpx``
    one ``httpx.AsyncClient`` whose pool holds as many connections as there are clients.

Each client sends its next request as soon as the previous answer is read (no pacing);
a latency is counted when its request completes inside the window. A plan with a
``count`` measures that many requests instead: those sent after the warm-up, the window
closing when the last of them is answered.

A plan may carry a :class:`Background`: requests sent at a fixed rate (open loop, each at
its own scheduled time, on connections of its own and always by the raw client) from the
start of the warm-up until the measured clients are done.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import numpy as np
import uvloop

ID = b"@ID@"  # replaced by a unique id in a body when the plan gives an id prefix
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Background:
    """Requests at a steady ``rate`` per second beside a plan's clients."""

    path: str
    bodies: list[bytes]
    rate: float
    # enough that an answer slower than connections / rate seconds delays no later request
    connections: int = 16


@dataclass
class Plan:
    port: int
    path: str
    bodies: list[bytes]
    concurrency: int = 32
    warmup: float = 1.0
    seconds: float = 5.0
    cycle: bool = True  # False: stop when the bodies run out
    id_prefix: str | None = None  # body i gets ``id_prefix + str(i)`` in place of ``ID``
    client: str = "raw"  # raw | httpx
    watch: dict[str, int] = field(default_factory=dict)  # name -> pid, CPU read in window
    reject: bytes | None = None  # a 200 answer containing this counts as an error
    headers: dict[str, str] = field(default_factory=dict)  # sent with every request
    # spread over several servers and paths: client k connects to ``ports[k % len]``, and
    # request i goes to ``paths[i % len]`` (empty: ``port`` and ``path`` alone)
    ports: list[int] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    method: str = "POST"  # GET sends no body (give one empty body)
    count: int = 0  # > 0: measure exactly this many requests; ``seconds`` is then unused
    background: Background | None = None


@dataclass
class Result:
    requests: int  # completed inside the window
    seconds: float  # the window's length (shorter when the bodies ran out)
    p50_ms: float
    p99_ms: float
    issued: int  # bodies sent in all (ids 0 .. issued - 1 were used)
    exhausted: bool
    errors: int
    first_error: str
    cpu: dict[str, float]  # "generator", each watched name, "others" -> CPU seconds in window
    background_rate: float = 0.0  # background requests answered per second in the window
    # share of the window in which some runnable process waited for a core (NaN unknown)
    cpu_wait: float = math.nan

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    def cpu_us_per_request(self, name: str) -> float:
        if not self.requests:  # a window too short to complete one request
            return math.nan
        return self.cpu[name] / self.requests * 1e6


def busy_seconds() -> float:
    """CPU seconds all processes on the machine have spent so far (all cores)."""
    with open("/proc/stat", "rb") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / CLK_TCK  # less idle and iowait


def cpu_wait_seconds() -> float:
    """Seconds so far in which some runnable process waited for a core: the kernel's CPU
    pressure (``/proc/pressure/cpu``, ``some``); NaN where the kernel does not tell."""
    try:
        with open("/proc/pressure/cpu", "rb") as f:
            some = f.readline().split()
    except OSError:
        return math.nan
    return int(some[-1].split(b"=")[1]) / 1e6


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads) so far."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class _Load:
    """Shared by the clients of one plan: the bodies, the window and what was measured."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.counter = itertools.count()
        self.source: Iterator[bytes] = (
            itertools.cycle(plan.bodies) if plan.cycle else iter(plan.bodies)
        )
        self.exhausted = False
        self.issued = 0
        self.latencies: list[float] = []
        self.errors = 0
        self.first_error = ""
        self.start = time.perf_counter()
        # a counted plan's window stays open until its last request is answered
        length = math.inf if plan.count else plan.seconds
        self.window = (self.start + plan.warmup, self.start + plan.warmup + length)
        self.last = self.window[0]
        self.counted = 0  # requests of a counted plan sent after the warm-up
        self.closed = asyncio.Event()  # set when the window closes
        self.background = 0  # background requests answered inside the window
        self.wait = math.nan  # share of the window some process waited for a core
        self.finished = False  # the measured clients are done: the background stops
        self.cpu: dict[str, float] = {}

    def next_body(self) -> tuple[str, bytes] | None:
        """The next request's path and body (None: the window is over or the bodies ran out)."""
        now = time.perf_counter()
        if now >= self.window[1] or self.counted >= self.plan.count > 0:
            return None
        if now >= self.window[0]:
            self.counted += 1
        body = next(self.source, None)
        if body is None:
            self.exhausted = True
            return None
        i = next(self.counter)
        self.issued = i + 1
        if self.plan.id_prefix is not None:
            body = body.replace(ID, f"{self.plan.id_prefix}{i}".encode())
        paths = self.plan.paths
        return (paths[i % len(paths)] if paths else self.plan.path), body

    def done(self, sent: float, status: int, data: bytes) -> None:
        now = time.perf_counter()
        reject = self.plan.reject
        if status != 200 or (reject is not None and reject in data):
            self.error(status, data)
        if self.plan.count:
            # counted by when it was sent; the window closes with the last one's answer
            if sent >= self.window[0] and len(self.latencies) < self.plan.count:
                self.latencies.append(now - sent)
                self.last = now
                if len(self.latencies) == self.plan.count:
                    self.window = (self.window[0], now)
                    self.closed.set()
        elif self.window[0] <= now <= self.window[1]:
            self.latencies.append(now - sent)
            self.last = now

    def error(self, status: int, data: bytes) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = f"{status}: {data[:300]!r}"

    async def watch_cpu(self) -> None:
        """CPU seconds of this process, the watched ones and all others over the window."""
        names = {"generator": 0, **self.plan.watch}

        def read() -> dict[str, float]:
            got = {
                name: time.process_time() if pid == 0 else cpu_seconds(pid)
                for name, pid in names.items()
            }
            got["all"] = busy_seconds()
            got["wait"] = cpu_wait_seconds()
            got["at"] = time.perf_counter()
            return got

        await asyncio.sleep(max(0.0, self.window[0] - time.perf_counter()))
        before = read()
        if self.plan.count:
            await self.closed.wait()
        else:
            await asyncio.sleep(max(0.0, self.window[1] - time.perf_counter()))
        after = read()
        self.wait = (after["wait"] - before["wait"]) / max(after["at"] - before["at"], 1e-9)
        self.cpu = {name: after[name] - before[name] for name in names}
        self.cpu["others"] = max(0.0, after["all"] - before["all"] - sum(self.cpu.values()))

    def result(self) -> Result:
        lat = np.asarray(self.latencies) * 1000
        p50, p99 = np.percentile(lat, [50, 99]).tolist() if lat.size else (float("nan"),) * 2
        end = self.last if self.exhausted else self.window[1]
        seconds = max(end - self.window[0], 1e-9)
        return Result(
            requests=len(self.latencies),
            seconds=seconds,
            p50_ms=p50,
            p99_ms=p99,
            issued=self.issued,
            exhausted=self.exhausted,
            errors=self.errors,
            first_error=self.first_error,
            cpu=self.cpu,
            background_rate=self.background / seconds,
            cpu_wait=self.wait,
        )


class Connection:
    """One keep-alive HTTP/1.1 connection sending pre-built request heads (``method`` for
    :meth:`send`; :meth:`request` takes any)."""

    def __init__(
        self, port: int, headers: dict[str, str], method: str = "POST", host: str = "127.0.0.1"
    ) -> None:
        self.host = host
        self.port = port
        self.method = method
        extra = "".join(f"{name}: {v}\r\n" for name, v in headers.items())
        self.rest = f" HTTP/1.1\r\nhost: {host}:{port}\r\n{extra}".encode()
        self.json = b"content-type: application/json\r\ncontent-length: "
        self.heads: dict[str, bytes] = {}

    async def __aenter__(self) -> Connection:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.writer.close()

    async def send(self, path: str, body: bytes) -> tuple[int, bytes]:
        """Send one request of this connection's method and read its answer: (status, body)."""
        head = self.heads.get(path)
        if head is None:
            head = self.heads[path] = f"{self.method} {path}".encode() + self.rest
        return await self._exchange(head, None if self.method == "GET" else body)

    async def request(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        """Send one request (no body: none sent) and read its answer: (status, body)."""
        return await self._exchange(f"{method} {path}".encode() + self.rest, body)

    async def _exchange(self, head: bytes, body: bytes | None) -> tuple[int, bytes]:
        if body is None:
            self.writer.write(head + b"\r\n")
        else:
            self.writer.write(b"%s%s%d\r\n\r\n%s" % (head, self.json, len(body), body))
        await self.writer.drain()
        got = await self.reader.readuntil(b"\r\n\r\n")
        status = int(got[9:12])
        at = got.lower().find(b"\r\ncontent-length:")
        if at < 0:
            if status in (204, 304):  # answers without a body
                return status, b""
            raise RuntimeError(f"answer without content-length: {got[:300]!r}")
        length = int(got[at + 17 : got.index(b"\r\n", at + 2)])
        return status, await self.reader.readexactly(length)


async def _raw_client(load: _Load, k: int) -> None:
    plan = load.plan
    port = plan.ports[k % len(plan.ports)] if plan.ports else plan.port
    async with Connection(port, plan.headers, plan.method) as connection:
        while (request := load.next_body()) is not None:
            path, body = request
            sent = time.perf_counter()
            status, data = await connection.send(path, body)
            load.done(sent, status, data)


async def _paced_client(load: _Load, slots: Iterator[int], bodies: Iterator[bytes]) -> None:
    """Send background request ``i`` at ``start + i / rate`` (at once when that has passed)."""
    plan = load.plan
    background = plan.background
    assert background is not None
    async with Connection(plan.port, plan.headers, "POST") as connection:
        while not load.finished:
            await asyncio.sleep(
                max(0.0, load.start + next(slots) / background.rate - time.perf_counter())
            )
            if load.finished:
                break
            status, data = await connection.send(background.path, next(bodies))
            if status != 200:
                load.error(status, data)
            if load.window[0] <= time.perf_counter() <= load.window[1]:
                load.background += 1


async def _httpx_client(load: _Load, client: httpx.AsyncClient) -> None:
    plan = load.plan
    headers = dict(plan.headers)
    if plan.method != "GET":
        headers["content-type"] = "application/json"
    while (request := load.next_body()) is not None:
        path, body = request
        sent = time.perf_counter()
        r = await client.request(plan.method, path, content=body or None, headers=headers)
        load.done(sent, r.status_code, r.content)


async def _run(plan: Plan) -> Result:
    load = _Load(plan)
    watcher = asyncio.ensure_future(load.watch_cpu())
    paced: list[asyncio.Future[None]] = []
    if plan.background is not None:
        slots, bodies = itertools.count(), itertools.cycle(plan.background.bodies)
        paced = [
            asyncio.ensure_future(_paced_client(load, slots, bodies))
            for _ in range(plan.background.connections)
        ]
    if plan.client == "raw":
        await asyncio.gather(*(_raw_client(load, k) for k in range(plan.concurrency)))
    elif plan.client == "httpx":
        if len(plan.ports) > 1:
            raise ValueError("the httpx client drives one server: give ports to the raw client")
        limits = httpx.Limits(
            max_connections=plan.concurrency, max_keepalive_connections=plan.concurrency
        )
        base = f"http://127.0.0.1:{plan.port}"
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60.0) as client:
            await asyncio.gather(*(_httpx_client(load, client) for _ in range(plan.concurrency)))
    else:
        raise ValueError(f"client must be 'raw' or 'httpx', got {plan.client!r}")
    load.finished = True
    await asyncio.gather(*paced)
    if load.exhausted:
        watcher.cancel()
        load.cpu = {name: float("nan") for name in ("generator", "others", *plan.watch)}
    else:
        await watcher
    return load.result()


def run(plan: Plan) -> Result:
    """Run one plan on a fresh uvloop event loop."""
    return uvloop.run(_run(plan))
