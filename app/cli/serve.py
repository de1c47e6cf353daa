"""``committee serve``: run the HTTP service under uvicorn, with a private Redis if none is set.

Every option defaults from :class:`~app.core.settings.Settings` (the ``COMMITTEE_*`` variables).
The resolved settings, the Redis URL included, are exported back into the environment so
that uvicorn's worker processes, which build the app with ``app.http.main:create_app``, read
the same ones.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import importlib
import json
import logging
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import uvicorn
import uvicorn._subprocess as uvicorn_subprocess
from pydantic import ValidationError

from app.core.logs import dump_stacks_on_sigusr1, log_config, log_format
from app.core.settings import Settings
from app.service.warmup import warm_here
from storage.auth import AuthStore
from storage.client import close, connect
from storage.errors import StorageError, Unavailable
from storage.repository import ModelStore
from storage.server import EmbeddedRedis, RedisServerError

log = logging.getLogger("committee.serve")

APP_FACTORY = "app.http.main:create_app"
H11_REQUEST_LINE = 64 * 1024  # bytes h11 allows beyond max_header_bytes (a request line)
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
OPTIONS = (
    "host",
    "port",
    "workers",
    "redis_url",
    "data_dir",
    "tls_cert",
    "tls_key",
    "insecure_no_auth",
    "log_level",
    "log_format",
)


def add_parser(sub: Any) -> None:
    """Add ``serve`` to the CLI's subcommands."""
    p = sub.add_parser("serve", help="run the HTTP service (starts a private Redis if needed)")
    p.add_argument("--host", help="address to listen on [COMMITTEE_HOST, 127.0.0.1]")
    p.add_argument("--port", type=int, help="port to listen on [COMMITTEE_PORT, 8000]")
    p.add_argument("--workers", type=int, help="worker processes [COMMITTEE_WORKERS, 1]")
    p.add_argument(
        "--redis-url",
        help="Redis to use [COMMITTEE_REDIS_URL]; when unset, a private one keeps its "
        "append-only file in --data-dir",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        help="private Redis's directory [COMMITTEE_DATA_DIR, committee-data]",
    )
    p.add_argument(
        "--tls-cert", type=Path, help="PEM certificate chain: serve HTTPS [COMMITTEE_TLS_CERT]"
    )
    p.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert [COMMITTEE_TLS_KEY]")
    p.add_argument(
        "--insecure-no-auth",
        action="store_true",
        default=None,
        help="serve a non-loopback --host although no API key exists [COMMITTEE_INSECURE_NO_AUTH]",
    )
    p.add_argument("--log-level", choices=LOG_LEVELS, help="[COMMITTEE_LOG_LEVEL, info]")
    p.add_argument(
        "--log-format",
        choices=("json", "text"),
        help="[COMMITTEE_LOG_FORMAT; by default text on a terminal, else json]",
    )
    p.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    """Resolve the settings, start a private Redis if none is configured, and run uvicorn."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(message)s")
    overrides = {k: getattr(args, k) for k in OPTIONS if getattr(args, k, None) is not None}
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        print(f"committee serve: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    # the log's format when none is given: text for a person at a terminal, else JSON
    explicit = settings.log_format if "log_format" in settings.model_fields_set else None
    settings = settings.model_copy(update={"log_format": log_format(explicit)})
    if (settings.tls_cert is None) != (settings.tls_key is None):
        print("committee serve: --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    dump_stacks_on_sigusr1()
    with contextlib.ExitStack() as stack:
        # SIGTERM unwinds this stack, so a private Redis is stopped too
        previous = signal.signal(signal.SIGTERM, _exit_on_signal)
        stack.callback(signal.signal, signal.SIGTERM, previous)
        if settings.redis_url is None:
            try:
                server = stack.enter_context(EmbeddedRedis(settings.data_dir))
            except RedisServerError as exc:
                print(f"committee serve: {exc}", file=sys.stderr)
                return 1
            settings = settings.model_copy(update={"redis_url": server.url})
            log.info("Using a private Redis at %s (data in %s)", server.url, server.data_dir)
        else:
            log.info("Using the Redis at %s", redact(settings.redis_url))
        refusal = _unguarded(settings) or _unsafe_redis(settings)
        if refusal:
            print(f"committee serve: {refusal}", file=sys.stderr)
            return 2
        os.environ.update(environment(settings))
        if settings.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            # request metrics of all workers, summed at each scrape
            metrics_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="metrics-"))
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
        if settings.workers > 1:
            stack.enter_context(_warm_workers(settings.warmup))
        try:
            uvicorn.run(
                APP_FACTORY,
                factory=True,
                host=settings.host,
                port=settings.port,
                workers=settings.workers,
                log_level=settings.log_level,
                log_config=log_config(settings.log_level, settings.log_format),
                ws_max_size=settings.ws_max_message_bytes,
                # h11 (when httptools is missing) bounds the request line and headers
                # itself, with a plain 400: bound it beyond the app's own 431
                h11_max_incomplete_event_size=settings.max_header_bytes + H11_REQUEST_LINE,
                # sockets beyond this get uvicorn's plain 503; requests beyond
                # max_connections get the app's JSON one (app.http.limits.Busy)
                limit_concurrency=2 * settings.max_connections,
                timeout_graceful_shutdown=settings.shutdown_timeout,
                ssl_certfile=settings.tls_cert,
                ssl_keyfile=settings.tls_key,
            )
        except KeyboardInterrupt:
            return 128 + signal.SIGINT
    return 0


@contextlib.contextmanager
def _warm_workers(warm: bool) -> Iterator[None]:
    """Make this process the one uvicorn's workers start from, while in the block: import
    the app and, with ``warm`` (the ``warmup`` setting), warm the kernels here; and have
    uvicorn fork its workers instead of starting fresh interpreters. A worker (a
    replacement for one that died included) then starts with the kernels loaded, shared
    copy-on-write, instead of importing the app and loading or compiling them again,
    several seconds of CPU each."""
    # metrics of this process's own (prometheus_client imported before the workers'
    # directory was set: a test's process), or threads, whose locks a fork leaves held
    values = sys.modules.get("prometheus_client.values")
    if (values and values.ValueClass is values.MutexValue) or threading.active_count() > 1:
        log.warning("workers start from fresh interpreters: this process cannot fork them")
        yield
        return
    importlib.import_module(APP_FACTORY.partition(":")[0])
    if warm:
        warm_here()
    global _forking
    spawn = uvicorn_subprocess.spawn
    uvicorn_subprocess.spawn = multiprocessing.get_context("fork")  # type: ignore[assignment]
    _forking = True
    try:
        yield
    finally:
        _forking = False
        uvicorn_subprocess.spawn = spawn


_forking = False  # whether a fork is one of uvicorn's workers (see _warm_workers)


def _default_signals() -> None:
    # a worker stops as a fresh one would until its server takes the signals over (the
    # parent's handlers are uvicorn's supervisor's, which only queue them for its loop)
    if not _forking:
        return
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    faulthandler.unregister(signal.SIGUSR1)  # it would think its handler still in place
    dump_stacks_on_sigusr1()


os.register_at_fork(after_in_child=_default_signals)


def _unguarded(settings: Settings) -> str:
    """Why the service must not start open to the network ('' if it may): it listens
    beyond loopback, no API key was ever made, none is configured, and nobody said it
    may."""
    if settings.loopback() or settings.insecure_no_auth or settings.admin_key:
        return ""
    assert settings.redis_url is not None

    async def auth_on() -> bool:
        clients = connect(settings.redis_url or "")
        try:
            return await AuthStore(clients, settings.key_prefix).version() > 0
        finally:
            await close(clients)

    try:
        if asyncio.run(auth_on()):
            return ""
    except StorageError as e:
        return f"cannot read the API keys: {e}"
    return (
        f"refusing to listen on {settings.host} with no API key: anyone who reaches the "
        "port could use every model. Make an admin key first (`committee keys create "
        "--scope admin`, or set COMMITTEE_ADMIN_KEY), or pass --insecure-no-auth"
    )


def _unsafe_redis(settings: Settings) -> str:
    """Why the Redis could lose acknowledged writes ('' if it cannot, or cannot be
    reached yet: then each worker checks it before its first write)."""

    async def check() -> None:
        clients = connect(settings.redis_url or "")
        try:
            store = ModelStore(clients, settings.key_prefix, ack=settings.ack)
            await store.check_server()
        finally:
            await close(clients)

    try:
        asyncio.run(check())
    except Unavailable:
        return ""
    except StorageError as e:
        return str(e)
    return ""


def environment(settings: Settings) -> dict[str, str]:
    """The ``COMMITTEE_*`` variables that reproduce ``settings`` in another process."""
    return {
        f"COMMITTEE_{name.upper()}": value if isinstance(value, str) else json.dumps(value)
        for name, value in settings.model_dump(mode="json").items()
        if value is not None
    }


def redact(url: str) -> str:
    """``url`` with its password hidden, for the log."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    # SIGTERM is the normal way to stop a service: a clean exit, whatever the workers
    raise SystemExit(0)
