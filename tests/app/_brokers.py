"""Helpers for the stream consumers' tests (and ``bench/consume.py``): a private
``nats-server`` with JetStream, a consumer run in this process or as ``committee consume``
processes, and a model's log read back to count each message's trial.

Each message of :func:`learn_body` carries its number (plus one) as the first of its
dense features, so the log says which messages it holds and how often.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson

from app.core.settings import Settings
from app.http.bodies import read_trials
from app.http.error_status import item_error
from app.service.access import Auth
from app.service.consume.consumer import Consumer, KeyAccess, Source
from app.service.consume.sources import open_source, parse_source
from app.service.log_export import read_page
from app.service.model_service import ModelService
from storage.auth import AuthStore
from storage.client import Clients, close, connect
from storage.repository import ModelStore

ROOT = Path(__file__).resolve().parents[2]
NATS_SERVER = "/usr/sbin/nats-server"
FEATURES = 4
MODEL = {
    "labels": ["a", "b"],
    "input": {"attributes": {"n_features": FEATURES}},
    "learner": {"kind": "perceptron"},
    "label_ttl": 3600.0,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def nats_server() -> Iterator[str]:
    """``nats-server -js`` on a free loopback port with a store of its own; its URL."""
    binary = shutil.which("nats-server") or NATS_SERVER
    if not os.path.exists(binary):
        raise RuntimeError(
            "the NATS tests need nats-server (Debian: apt-get install nats-server; "
            "./run test installs it)"
        )
    with tempfile.TemporaryDirectory(prefix="nats-") as store:
        for _ in range(5):
            port = free_port()
            args = [binary, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", store]
            log = open(Path(store) / "server.log", "wb")  # noqa: SIM115
            process = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
            if _listening(port, process):
                break
            process.kill()
            process.wait()
            log.close()
        else:
            raise RuntimeError(
                f"nats-server did not start: {(Path(store) / 'server.log').read_text()}"
            )
        try:
            yield f"nats://127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()


def _listening(port: int, process: subprocess.Popen[bytes], timeout: float = 15.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if process.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return True
        time.sleep(0.05)
    return False


def learn_body(i: int, sparse: bool = False) -> bytes:
    """A learn whose first feature is ``i + 1``: its trial is found in the log by it.
    ``sparse``: its features as ``{index: value}`` (the form a consumer reads a batch of
    in one compiled pass) rather than a list."""
    features = [float(i + 1), 1.0, float(i % 7), -1.0][:FEATURES]
    if sparse:
        doc = {"features": {str(j): v for j, v in enumerate(features) if v}}
        return orjson.dumps({"instance": doc, "label": "ab"[i % 2]})
    return orjson.dumps({"instance": {"features": features}, "label": "ab"[i % 2]})


class Service:
    """The service's core in this process, over ``redis_url`` under ``prefix``: its
    models, and consumers of it."""

    def __init__(self, redis_url: str, prefix: str, **settings: Any) -> None:
        self.settings = Settings(redis_url=redis_url, key_prefix=prefix, warmup=False, **settings)
        self.clients: Clients = connect(redis_url)
        self.service = ModelService(ModelStore(self.clients, prefix), self.settings)

    async def create(self, name: str, config: dict[str, Any] | None = None) -> None:
        await self.service.create_model(name, config or MODEL)

    async def api_key(self, scope: str, models: str = "*") -> str:
        _, secret = await self.auth_store().create(scope, models, "consumer")
        return secret

    def auth_store(self) -> AuthStore:
        return AuthStore(self.clients, self.settings.key_prefix, self.settings.audit_max)

    def consumer(
        self, source_url: str, secret: str | None = None, reader: Any = read_trials
    ) -> Consumer:
        """A consumer of ``source_url``, as ``committee consume`` makes one; ``reader``
        reads the learns' bodies together (None: each by itself)."""
        source: Source = open_source(parse_source(source_url), self.clients, self.settings)
        access = KeyAccess(Auth(self.auth_store(), self.settings), secret)
        return Consumer(self.service, source, access, item_error, self.settings, reader)

    @contextlib.asynccontextmanager
    async def running(
        self, source_url: str, secret: str | None = None, reader: Any = read_trials
    ) -> AsyncIterator[Consumer]:
        """A consumer of ``source_url`` running in a task until the block ends."""
        c = self.consumer(source_url, secret, reader)
        await c.access.start()
        await c.source.open()
        stop = asyncio.Event()
        task = asyncio.ensure_future(c.run(stop))
        try:
            yield c
        finally:
            stop.set()
            await task
            await c.source.close()
            await c.access.close()

    async def logged(self, name: str) -> Counter[int]:
        """How often each message's number (:func:`learn_body`) is in the model's log."""
        out: Counter[int] = Counter()
        after = 0
        while True:
            page = await read_page(self.service, name, after, self.settings.max_log_entries)
            for line in page.lines:
                doc = orjson.loads(line)
                if doc["kind"] == "learn":
                    features = doc["instance"]["features"]  # a list, or {index: value}
                    first = features[0] if isinstance(features, list) else features["0"]
                    out[int(first) - 1] += 1
            if page.next_from >= page.version or not page.lines:
                return out
            after = page.next_from

    async def close(self) -> None:
        await self.service.close()
        await close(self.clients)


def create_model(redis_url: str, prefix: str, name: str) -> None:
    """Make model ``name`` (:data:`MODEL`), from outside an event loop."""

    async def go() -> None:
        s = Service(redis_url, prefix)
        try:
            await s.create(name)
        finally:
            await s.close()

    asyncio.run(go())


def logged(redis_url: str, prefix: str, name: str) -> Counter[int]:
    """:meth:`Service.logged`, from outside an event loop."""

    async def go() -> Counter[int]:
        s = Service(redis_url, prefix)
        try:
            return await s.logged(name)
        finally:
            await s.close()

    return asyncio.run(go())


async def until(check: Any, timeout: float = 30.0, every: float = 0.05) -> Any:
    """``check()`` (awaited when it gives an awaitable) until it is truthy (its value),
    or fail after ``timeout``."""
    end = time.monotonic() + timeout
    while True:
        got = check()
        if inspect.isawaitable(got):
            got = await got
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"not within {timeout} s: {check}")
        await asyncio.sleep(every)


class ConsumerProcesses:
    """``committee consume`` processes of one source, by name; each kept in its own
    process group so that a SIGKILL reaches it alone."""

    def __init__(self, source: str, env: dict[str, str], logs: Path) -> None:
        self.source, self.env, self.logs = source, env, logs
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, source: str | None = None) -> None:
        environ = {**os.environ, **self.env, "PYTHONPATH": str(ROOT)}
        out = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115
        self.running[name] = subprocess.Popen(
            [sys.executable, "-m", "app.cli.main", "consume", "--source", source or self.source],
            cwd=ROOT,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
        out.close()

    def kill(self, name: str) -> None:
        """SIGKILL: the process ends wherever it is, its messages unacknowledged."""
        p = self.running.pop(name)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()

    def stop_all(self) -> None:
        for p in self.running.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGTERM)
        for name, p in list(self.running.items()):
            try:
                code = p.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
                code = -9
            del self.running[name]
            if code not in (0, -signal.SIGTERM):  # (SIGTERM before its handler was set)
                log = (self.logs / f"{name}.log").read_text()[-3000:]
                raise AssertionError(f"consumer {name} exited with {code}:\n{log}")

    def alive(self) -> None:
        for name, p in self.running.items():
            if p.poll() is not None:
                log = (self.logs / f"{name}.log").read_text()[-3000:]
                raise AssertionError(f"consumer {name} exited with {p.returncode}:\n{log}")
