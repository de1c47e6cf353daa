"""Redis Streams as a source: a consumer group on a stream the application writes to.

The application adds one entry per message, ``XADD <stream> * model <name> op
<predict|label|learn> body <the REST call's JSON body>``, and may give a learn its
own idempotency key (``key <key>``); otherwise the entry's id is its key (``<stream>/<id>``).

Each consumer process is one consumer of the group, reading new entries with
``XREADGROUP ... BLOCK``. On start it reads its own pending entries again (those a
process of the same consumer name had read before it was killed), and every while it
claims entries idle longer than ``consume_claim_idle_ms`` from any consumer of the group
(``XAUTOCLAIM``): those of a consumer that died. A batch is settled in one transaction:
its answers added to the reply stream (``XADD <reply> MAXLEN ~ consume_reply_maxlen *
id <entry id> answer <JSON>``), its dead letters to the dead-letter stream (``id``,
``reason`` and the entry's fields), and all of them acknowledged (``XACK``): each
delivery's answer is published exactly when the delivery is acknowledged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from app.core.settings import Settings
from app.service.consume.consumer import Settlement
from app.service.consume.messages import Delivery
from storage.client import Clients
from storage.errors import StorageError, redis_errors

__all__ = ["RedisStreams", "RedisStreamsOptions"]

BLOCK_MS = 1_000  # the longest XREADGROUP waits for new entries


@dataclass(frozen=True, slots=True)
class RedisStreamsOptions:
    """Where to read and write: the ``stream`` the application writes, its ``group``, the
    ``consumer``'s name in it, the ``reply`` and ``dead`` streams."""

    stream: str
    group: str
    consumer: str
    reply: str
    dead: str


class RedisStreams:
    """One consumer of a Redis Streams consumer group (see the module docstring)."""

    def __init__(self, clients: Clients, options: RedisStreamsOptions, settings: Settings) -> None:
        self.clients = clients
        self.redis = clients.redis
        self.options = options
        self.settings = settings
        self.name = f"redis stream {options.stream!r} (group {options.group!r})"
        self._own_pending = True  # read this consumer's pending entries first
        self._claim_at = 0.0  # monotonic time of the next XAUTOCLAIM
        self._cursor = "0-0"
        self._again: list[Delivery] = []  # not acknowledged here: read again first

    async def open(self) -> None:
        o = self.options
        try:
            async with redis_errors():
                # from the stream's start: entries written before the group existed count
                await self.redis.xgroup_create(o.stream, o.group, id="0", mkstream=True)
        except StorageError as e:
            if "BUSYGROUP" not in str(e):
                raise

    async def fetch(self, most: int) -> list[Delivery]:
        if self._again:
            out, self._again = self._again[:most], self._again[most:]
            return out
        if self._own_pending:
            got = await self._read("0", most, None)
            if got:
                return got
            self._own_pending = False
        if time.monotonic() >= self._claim_at:
            got = await self._claim(most)
            if got:
                return got
        return await self._read(">", most, BLOCK_MS)

    async def _read(self, start: str, most: int, block: int | None) -> list[Delivery]:
        o = self.options
        async with redis_errors():
            reply: Any = await self.redis.xreadgroup(
                o.group, o.consumer, {o.stream: start}, count=most, block=block
            )
        if not reply:
            return []
        entries = reply[0][1] if isinstance(reply, list) else next(iter(reply.values()))[0]
        # an own pending entry trimmed from the stream since comes with no fields
        return [self._delivery(i, f) for i, f in entries if f]

    async def _claim(self, most: int) -> list[Delivery]:
        """Entries idle longer than ``consume_claim_idle_ms`` at any consumer (one that
        died), claimed for this one: a pass over the group's pending entries, ``most``
        at a time, then a pause of a fraction of the idle time."""
        o = self.options
        idle = self.settings.consume_claim_idle_ms
        async with redis_errors():
            reply: Any = await self.redis.xautoclaim(
                o.stream, o.group, o.consumer, idle, self._cursor, count=most
            )
        cursor, entries = reply[0], reply[1]
        self._cursor = cursor.decode() if isinstance(cursor, bytes) else str(cursor)
        if self._cursor == "0-0":  # a whole pass done
            self._claim_at = time.monotonic() + idle / 4000
        return [self._delivery(i, f) for i, f in entries if f]

    def _delivery(self, entry_id: bytes, fields: dict[bytes, bytes]) -> Delivery:
        i = entry_id.decode()
        model, op, key = (fields.get(k) for k in (b"model", b"op", b"key"))
        return Delivery(
            i,
            None if model is None else model.decode("utf-8", "replace"),
            None if op is None else op.decode("utf-8", "replace"),
            fields.get(b"body"),
            f"{self.options.stream}/{i}" if key is None else key.decode("utf-8", "replace"),
            fields,
        )

    async def settle(self, s: Settlement) -> None:
        o = self.options
        most = self.settings.consume_reply_maxlen
        ids = [d.id for d, _ in s.answers] + [d.id for d, _ in s.dead]
        # one transaction, where the streams share a node (not across a cluster's slots)
        pipe = self.redis.pipeline(transaction=self.clients.kind != "cluster")
        for d, answer in s.answers:
            pipe.xadd(o.reply, {"id": d.id, "answer": answer}, maxlen=most, approximate=True)
        for d, reason in s.dead:
            fields = {k: v for k, v in (d.handle or {}).items() if k not in (b"id", b"reason")}
            pipe.xadd(
                o.dead, {"id": d.id, "reason": reason, **fields}, maxlen=most, approximate=True
            )
        if ids:
            pipe.xack(o.stream, o.group, *ids)
        async with redis_errors():
            await pipe.execute()
        self._again += s.again

    async def close(self) -> None:
        return None
