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

from dataclasses import dataclass
from typing import Any

import nats
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
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
        self._js: JetStreamContext | None = None
        self._sub: JetStreamContext.PullSubscription | None = None
        self._origin = ""  # the stream's name and creation, the prefix of learns' keys

    async def open(self) -> None:
        o = self.options
        self._nc = nc = await nats.connect(
            servers=o.servers, max_reconnect_attempts=-1, name="committee consume"
        )
        self._js = js = nc.jetstream()
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
        self._sub = await js.pull_subscribe(
            f"{o.subject}.>", durable=o.durable, stream=o.stream, config=config
        )

    async def fetch(self, most: int) -> list[Delivery]:
        assert self._sub is not None
        try:
            msgs = await self._sub.fetch(most, timeout=FETCH_SECONDS)
        except (TimeoutError, NatsTimeout):
            return []
        return [self._delivery(m) for m in msgs]

    def _delivery(self, m: Msg) -> Delivery:
        o = self.options
        meta = m.metadata
        seq = meta.sequence.stream
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
            meta.num_delivered or 1,
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
        if self._nc is not None:  # (every settlement was flushed: nothing to drain)
            await self._nc.close()


def _handle(d: Delivery) -> Msg:
    m: Any = d.handle
    assert isinstance(m, Msg)
    return m
