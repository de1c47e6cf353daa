"""``committee consume``: apply trials from a Redis stream or a NATS JetStream stream.

A process of its own beside the service's workers, on the service's Redis
(``COMMITTEE_REDIS_URL``, which it needs: it starts no private one), applying each
message as the REST call of its op would, with the rights of the API key it is given
(``--api-key``, or ``COMMITTEE_API_KEY``; none is needed while auth is off). Run several
for more throughput: they share the group (Redis) or the durable consumer (NATS).
SIGTERM or Ctrl-C stops it once the batches in flight are settled. See docs/streams.rst.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from typing import Any

from pydantic import ValidationError

from app.core.collector import collect_less
from app.core.logs import log_format
from app.core.settings import Settings
from app.http.bodies import read_trials
from app.http.error_status import item_error
from app.service.access import Auth
from app.service.consume.consumer import AccessRefused, Consumer, KeyAccess, run_consumer
from app.service.consume.sources import SourceError, open_source, parse_source
from app.service.model_service import ModelService
from app.service.warmup import Warmup
from storage.auth import AuthStore
from storage.client import close, connect
from storage.errors import StorageError
from storage.repository import ModelStore

log = logging.getLogger("committee.consume")
KEY_VARIABLE = "COMMITTEE_API_KEY"
OPTIONS = (
    "redis_url",
    "key_prefix",
    "consume_batch",
    "consume_max_in_flight",
    "consume_max_message_bytes",
    "consume_claim_idle_ms",
    "consume_max_deliveries",
    "log_level",
)


def add_parser(sub: Any) -> None:
    """Add ``consume`` to the CLI's subcommands."""
    p = sub.add_parser("consume", help="apply trials from a Redis or NATS stream")
    p.add_argument(
        "--source",
        required=True,
        help="redis://HOST:PORT#stream=NAME[,group=G,consumer=C,reply=R,dead=D] (redis:"
        "#stream=NAME: the service's Redis) or nats://HOST:PORT[#stream=S,subject=P,"
        "durable=D,reply=R,dead=D]",
    )
    p.add_argument("--api-key", help=f"the key whose rights the consumer has [{KEY_VARIABLE}]")
    p.add_argument("--redis-url", help="the service's Redis [COMMITTEE_REDIS_URL]")
    p.add_argument("--key-prefix", help="the service's key prefix [COMMITTEE_KEY_PREFIX]")
    p.add_argument("--consume-batch", type=int, help="[COMMITTEE_CONSUME_BATCH, 256]")
    p.add_argument(
        "--consume-max-in-flight", type=int, help="[COMMITTEE_CONSUME_MAX_IN_FLIGHT, 2048]"
    )
    p.add_argument(
        "--consume-max-message-bytes",
        type=int,
        help="[COMMITTEE_CONSUME_MAX_MESSAGE_BYTES, 1 MiB]",
    )
    p.add_argument(
        "--consume-claim-idle-ms", type=int, help="[COMMITTEE_CONSUME_CLAIM_IDLE_MS, 30000]"
    )
    p.add_argument(
        "--consume-max-deliveries", type=int, help="[COMMITTEE_CONSUME_MAX_DELIVERIES, 10]"
    )
    p.add_argument(
        "--log-level",
        choices=("critical", "error", "warning", "info", "debug"),
        help="[COMMITTEE_LOG_LEVEL, info]",
    )
    p.set_defaults(func=consume)


def consume(args: argparse.Namespace) -> int:
    overrides = {k: getattr(args, k) for k in OPTIONS if getattr(args, k, None) is not None}
    try:
        settings = Settings(**overrides)
        spec = parse_source(args.source)
    except (ValidationError, SourceError) as e:
        print(f"committee consume: {e}", file=sys.stderr)
        return 2
    if settings.redis_url is None:
        print(
            "committee consume: COMMITTEE_REDIS_URL (or --redis-url) is not set: give the "
            "service's Redis",
            file=sys.stderr,
        )
        return 2
    level = settings.log_level.upper() if settings.log_level != "trace" else "DEBUG"
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        if log_format(None) == "text"
        else '{"time": "%(asctime)s", "level": "%(levelname)s", "message": "%(message)s"}',
    )
    secret = args.api_key or os.environ.get(KEY_VARIABLE) or None
    try:
        return asyncio.run(_consume(settings, spec, secret))
    except KeyboardInterrupt:
        return 128 + signal.SIGINT


async def _consume(settings: Settings, spec: Any, secret: str | None) -> int:
    assert settings.redis_url is not None
    clients = connect(settings.redis_url, timeout=5.0 + settings.ack_timeout_ms / 1000)
    warmup = Warmup() if settings.warmup else None
    if warmup is not None:
        warmup.start()
    store = ModelStore(
        clients, settings.key_prefix, ack=settings.ack, ack_timeout_ms=settings.ack_timeout_ms
    )
    service = ModelService(store, settings, warmup)
    access = KeyAccess(
        Auth(AuthStore(clients, settings.key_prefix, settings.audit_max), settings), secret
    )
    collect_less(settings.gc_threshold)  # as a server worker collects
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        source = open_source(spec, clients, settings)
        consumer = Consumer(service, source, access, item_error, settings, read_trials)
        log.info("consuming %s", source.name)
        await run_consumer(consumer, stop)
        log.info("stopped after %d messages", consumer.settled)
        return 0
    except (AccessRefused, ValueError) as e:
        print(f"committee consume: {e}", file=sys.stderr)
        return 2
    except (StorageError, OSError, TimeoutError) as e:
        print(f"committee consume: {e}", file=sys.stderr)
        return 1
    finally:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(settings.shutdown_timeout):
                await service.close()
                await close(clients)
