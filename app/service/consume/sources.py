"""A source from its URL: ``redis://...#stream=NAME,...`` or ``nats://...#stream=NAME,...``.

The part after ``#`` holds the options, ``name=value`` separated by commas:

* Redis (``redis://``, ``rediss://``, ``unix://``; ``redis:`` alone for the service's
  own Redis, ``redis_url``): ``stream`` (required), ``group`` [committee], ``consumer``
  [the host's name and the process id; give each process a name of its own that it
  keeps across restarts, and a restarted one takes its pending messages back at once],
  ``reply`` [``<stream>:replies``], ``dead`` [``<stream>:dead``].
* NATS (``nats://``, ``tls://``; several servers separated by commas): ``stream``
  [COMMITTEE_TRIALS], ``subject`` [committee.trials], ``durable`` [committee],
  ``reply`` [committee.replies], ``dead`` [committee.dead].
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from app.core.settings import Settings
from app.service.consume.consumer import Source
from app.service.consume.nats_jetstream import NatsJetStream, NatsOptions
from app.service.consume.redis_streams import RedisStreams, RedisStreamsOptions
from storage.client import Clients, close, connect

__all__ = ["SourceSpec", "open_source", "parse_source"]

REDIS_SCHEMES = ("redis", "rediss", "unix")
NATS_SCHEMES = ("nats", "tls")
_OPTIONS = {
    "redis": {"stream", "group", "consumer", "reply", "dead"},
    "nats": {"stream", "subject", "durable", "reply", "dead"},
}


class SourceError(ValueError):
    """A source URL that cannot be used, saying why."""


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """A parsed source: its ``kind`` (redis or nats), the ``url`` to connect to (None:
    the service's own Redis) and its options."""

    kind: str
    url: str | None
    options: dict[str, str]

    def redis(self) -> RedisStreamsOptions:
        o = self.options
        stream = o["stream"]
        return RedisStreamsOptions(
            stream,
            o.get("group", "committee"),
            o.get("consumer", f"{socket.gethostname()}-{os.getpid()}"),
            o.get("reply", f"{stream}:replies"),
            o.get("dead", f"{stream}:dead"),
        )

    def nats(self) -> NatsOptions:
        o = self.options
        assert self.url is not None
        parts = urlsplit(self.url)
        servers = [f"{parts.scheme}://{n}" for n in parts.netloc.split(",")]
        return NatsOptions(
            servers,
            o.get("stream", "COMMITTEE_TRIALS"),
            o.get("subject", "committee.trials"),
            o.get("durable", "committee"),
            o.get("reply", "committee.replies"),
            o.get("dead", "committee.dead"),
        )


def parse_source(url: str) -> SourceSpec:
    """The source ``url`` names; :class:`SourceError` saying what is wrong."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    kind = "redis" if scheme in REDIS_SCHEMES else "nats" if scheme in NATS_SCHEMES else ""
    if not kind:
        raise SourceError(
            f"source {url[:80]!r}: expected redis://...#stream=NAME or nats://...#stream=NAME"
        )
    options: dict[str, str] = {}
    for part in filter(None, parts.fragment.split(",")):
        name, eq, value = part.partition("=")
        if not eq or not value:
            raise SourceError(f"source option {part!r}: expected name=value")
        if name not in _OPTIONS[kind]:
            raise SourceError(
                f"source option {name!r}: a {kind} source takes {', '.join(sorted(_OPTIONS[kind]))}"
            )
        options[name] = value
    if kind == "redis" and "stream" not in options:
        raise SourceError(f"source {url[:80]!r}: a Redis source needs #stream=NAME")
    if kind == "nats" and not parts.netloc:
        raise SourceError(f"source {url[:80]!r}: expected nats://HOST:PORT")
    plain = urlunsplit(parts._replace(fragment=""))
    own = kind == "redis" and not parts.netloc and not parts.path.strip("/")
    return SourceSpec(kind, None if own else plain, options)


def open_source(spec: SourceSpec, service_clients: Clients, settings: Settings) -> Source:
    """The source ``spec`` describes; a Redis source on the service's own Redis shares
    its clients."""
    if spec.kind == "nats":
        return NatsJetStream(spec.nats(), settings)
    if spec.url is None:
        return RedisStreams(service_clients, spec.redis(), settings)
    return _OwnClients(connect(spec.url), spec.redis(), settings)


class _OwnClients(RedisStreams):
    """A Redis source on a Redis of its own, whose clients it closes."""

    def __init__(self, clients: Clients, options: RedisStreamsOptions, settings: Settings) -> None:
        super().__init__(clients, options, settings)

    async def close(self) -> None:
        await close(self.clients)
