"""NATS JetStream as a source: a durable pull consumer on the stream of the trials.

The application publishes each message on ``<subject>.<model>.<op>`` (``op`` one of
``predict``, ``label``, ``learn``; a model name may hold dots), its payload the REST
call's JSON body; a learn may carry its own idempotency key in the header
``Idempotency-Key``, else its key is its place in the stream (the stream's name and
creation time and the message's sequence, which a stream made again does not repeat).

The stream (``<subject>.>``) is made when missing, and so are streams that keep the
answers (``<reply>``) and the dead letters (``<dead>``) when no stream captures those
subjects. Every consumer process pulls from one durable consumer (``durable``), shared:
a message unacknowledged for ``consume_claim_idle_ms`` (its ack wait) goes to another.
A process pulls with one request outstanding at a time, its messages gathered by a
subscription's callback on an inbox of its own (the client's ``fetch`` waits for each
message with a timer of its own): first a request that takes what the stream holds now
(``no_wait``), and when that found nothing, one that waits up to a second for the next
messages, read as they come.
A batch is settled by publishing its answers (header ``Committee-Id``, the message's
sequence) and dead letters (the message's payload, headers ``Committee-Reason``,
``Committee-Id`` and ``Committee-Subject``), flushing them to the server, then
acknowledging the answered messages and terminating the dead ones (no redelivery);
a message to try again is nak'd with a delay that doubles with each delivery (up to a
minute). A message's deliveries are in its metadata: one delivered more than
``consume_max_deliveries`` times is dead-lettered, and the durable consumer is made
with ``max_deliver`` one more, so that the server offers it that last time and no more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import nats
import orjson
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import NotFoundError

from app.core.settings import Settings
from app.service.consume.consumer import Settlement
from app.service.consume.messages import Delivery

__all__ = ["NatsJetStream", "NatsOptions"]

FETCH_SECONDS = 1.0  # the longest a fetch waits for messages
NAK_DELAY = 1.0  # seconds before a message nak'd (Redis was unavailable) comes again
NAK_MOST = 60.0  # ... at most, the delay doubling with each delivery
MAX_ACK_PENDING = 100_000  # unacknowledged messages of the durable consumer, all processes
API = "$JS.API"  # JetStream's API subjects (the default domain)


@dataclass(frozen=True, slots=True)
class NatsOptions:
    """The ``servers``, the ``stream`` and its ``subject`` prefix, the ``durable``
    consumer's name, and the ``reply`` and ``dead`` subjects."""

    servers: list[str]
    stream: str
    subject: str
    durable: str
    reply: str
    dead: str


class NatsJetStream:
    """One process of a JetStream durable pull consumer (see the module docstring)."""

    def __init__(self, options: NatsOptions, settings: Settings) -> None:
        self.options = options
        self.settings = settings
        self.name = f"NATS stream {options.stream!r} (consumer {options.durable!r})"
        self._nc: NatsClient | None = None
        self._sub: Subscription | None = None
        self._origin = ""  # the stream's name and creation, the prefix of learns' keys
        self._next = f"{API}.CONSUMER.MSG.NEXT.{options.stream}.{options.durable}"
        self._box: list[Msg] = []  # delivered to this process and not yet fetched
        self._owed = 0  # messages the outstanding pull request may still bring (0: none)
        self._came = asyncio.Event()  # a message or the request's end came

    async def open(self) -> None:
        o = self.options
        self._nc = nc = await nats.connect(
            servers=o.servers, max_reconnect_attempts=-1, name="committee consume"
        )
        js = nc.jetstream()
        try:
            info = await js.stream_info(o.stream)
        except NotFoundError:
            info = await js.add_stream(name=o.stream, subjects=[f"{o.subject}.>"])
        created = info.created.isoformat() if info.created is not None else "0"
        self._origin = f"{o.stream}@{created}"
        for subject, suffix in ((o.reply, "REPLIES"), (o.dead, "DEAD")):
            try:
                await js.find_stream_name_by_subject(subject)
            except NotFoundError:
                await js.add_stream(name=f"{o.stream}_{suffix}", subjects=[subject])
        config = ConsumerConfig(
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.settings.consume_claim_idle_ms / 1000,
            max_ack_pending=MAX_ACK_PENDING,
            max_deliver=self.settings.consume_max_deliveries + 1,
        )
        try:
            await js.consumer_info(o.stream, o.durable)
        except NotFoundError:
            config.durable_name = o.durable
            config.filter_subject = f"{o.subject}.>"
            await js.add_consumer(o.stream, config)
        self._sub = await nc.subscribe(nc.new_inbox(), cb=self._received)

    async def _received(self, m: Msg) -> None:
        """A message delivered for the pull request, or (no reply subject: a status) the
        request's end: 404 nothing more now, 408 expired, 409 refused; 100 is a
        heartbeat."""
        if m.reply:
            self._box.append(m)
            self._owed = max(0, self._owed - 1)
        elif (m.headers or {}).get("Status") != "100":
            self._owed = 0
        self._came.set()

    async def _pull(self, most: int, wait: float | None) -> None:
        """Ask for up to ``most`` messages: those there now (``wait`` None), or those
        coming within ``wait`` seconds."""
        assert self._nc is not None and self._sub is not None
        ask: dict[str, object] = {"batch": most}
        if wait is None:
            ask["no_wait"] = True
        else:
            ask["expires"] = int(wait * 1e9)
        self._owed = most
        self._came.clear()
        await self._nc.publish(self._next, orjson.dumps(ask), reply=self._sub.subject)

    async def _until(self, done: Callable[[], bool], seconds: float) -> None:
        """Wait until ``done()`` (checked as messages come) or ``seconds`` passed; then
        the request is taken as ended (a late message still lands in the box)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while not done():
                    self._came.clear()
                    await self._came.wait()
        if not done():
            self._owed = 0

    async def fetch(self, most: int) -> list[Delivery]:
        if not self._box and not self._owed:
            await self._pull(most, None)  # what the stream holds now
            await self._until(lambda: not self._owed, FETCH_SECONDS)
            if not self._box:  # nothing: a request that waits for the next ones
                await self._pull(most, FETCH_SECONDS)
        if not self._box and self._owed:
            await self._until(lambda: bool(self._box) or not self._owed, FETCH_SECONDS + 1)
        got, self._box = self._box[:most], self._box[most:]
        return [self._delivery(m) for m in got]

    def _delivery(self, m: Msg) -> Delivery:
        o = self.options
        seq, deliveries = _place(m)
        rest = m.subject.removeprefix(o.subject + ".")
        model, _, op = rest.rpartition(".")
        key = (m.headers or {}).get("Idempotency-Key")
        return Delivery(
            str(seq),
            model or None,
            op or None,
            m.data,
            f"{self._origin}/{seq}" if key is None else key,
            m,
            deliveries or 1,
        )

    async def settle(self, s: Settlement) -> None:
        nc = self._nc
        assert nc is not None
        o = self.options
        for d, answer in s.answers:
            await nc.publish(o.reply, answer, headers={"Committee-Id": d.id})
        for d, reason in s.dead:
            m: Msg = d.handle
            headers = {
                "Committee-Reason": reason.replace("\r", " ").replace("\n", " ")[:1000],
                "Committee-Id": d.id,
                "Committee-Subject": m.subject,
            }
            await nc.publish(o.dead, m.data, headers=headers)
        await nc.flush()  # published, then acknowledged
        for d, _ in s.answers:
            await _handle(d).ack()
        for d, _ in s.dead:
            await _handle(d).term()
        for d in s.again:
            await _handle(d).nak(delay=min(NAK_DELAY * 2 ** (d.deliveries - 1), NAK_MOST))
        await nc.flush()

    async def close(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
        if self._nc is not None:  # (every settlement was flushed: nothing to drain)
            await self._nc.close()


def _place(m: Msg) -> tuple[int, int]:
    """A message's stream sequence and deliveries, read from its ack subject as
    ``m.metadata`` reads them (``$JS.ACK.<stream>.<consumer>.<deliveries>.<stream seq>
    .<consumer seq>.<time>.<pending>``) without making the rest; ``m.metadata`` for the
    other forms."""
    t = (m.reply or "").split(".")
    if len(t) == 9 and t[0] == "$JS" and t[1] == "ACK":
        return int(t[5]), int(t[4])
    meta = m.metadata
    return meta.sequence.stream, meta.num_delivered


def _handle(d: Delivery) -> Msg:
    m: Any = d.handle
    assert isinstance(m, Msg)
    return m
