"""Redis Streams as a source: a consumer group on a stream the application writes to.

The application adds one entry per message, ``XADD <stream> * model <name> op
<predict|label|learn> body <the REST call's JSON body>``, and may give a learn its
own idempotency key (``key <key>``); otherwise the entry's id is its key (``<stream>/<id>``).

Each consumer process is one consumer of the group, reading new entries with
``XREADGROUP ... BLOCK``. On start it reads its own pending entries again (those a
process of the same consumer name had read before it was killed), and every while it
claims entries idle longer than ``consume_claim_idle_ms`` from any consumer of the group
(``XAUTOCLAIM``): those of a consumer that died. An entry read again or claimed has its
delivery count read (``XPENDING``): one delivered more than ``consume_max_deliveries``
times is dead-lettered. Entries to try again (their call found Redis unavailable) stay
with this process, which reads them again first without a new delivery.

A batch is settled in one transaction, one round trip: its answers added to the reply
stream (``XADD <reply> MAXLEN ~ consume_reply_maxlen * id <entry id> answer <JSON>``),
its dead letters to the dead-letter stream (``id``, ``reason`` and the entry's fields),
and all of them acknowledged (``XACK``): each delivery's answer is published exactly
when the delivery is acknowledged. (On a Redis Cluster, where the streams may live on
several nodes, the same commands are pipelined without a transaction.)
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
from storage.resp import Connection, ReplyError
from storage.topology import ClusterConnection

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
        self._pending_from = "0"  # ... after this id
        self._claim_at = 0.0  # monotonic time of the next XAUTOCLAIM
        self._cursor = "0-0"
        self._again: list[Delivery] = []  # not acknowledged here: read again first
        self._held: set[str] = set()  # ids read and not yet acknowledged, again included

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
        got: list[Delivery] = []
        while self._own_pending and not got:
            got = await self._read(self._pending_from, most, None)
        if not got and time.monotonic() >= self._claim_at:
            got = await self._claim(most)
        if not got:
            got = await self._read(">", most, BLOCK_MS)
        self._held.update(d.id for d in got)
        return got

    async def _read(self, start: str, most: int, block: int | None) -> list[Delivery]:
        o = self.options
        async with redis_errors():
            reply: Any = await self.redis.xreadgroup(
                o.group, o.consumer, {o.stream: start}, count=most, block=block
            )
        entries: list[Any] = []
        if reply:
            entries = reply[0][1] if isinstance(reply, list) else next(iter(reply.values()))[0]
        if start == ">":
            return [self._delivery(i, f) for i, f in entries]
        # this consumer's own pending entries, from after the last one read (those before
        # are in flight): delivered before
        if not entries:
            self._own_pending = False
            return []
        self._pending_from = entries[-1][0].decode()
        out = [self._delivery(i, f) for i, f in entries if f]
        gone = [i for i, f in entries if not f]  # trimmed from the stream since: nothing to do
        if gone:
            async with redis_errors():
                await self.redis.xack(o.stream, o.group, *gone)
        if out:
            await self._count(out)
        return out

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
        # this consumer's own entries in flight, idle while their batch is applied, are
        # not taken twice
        out = [self._delivery(i, f) for i, f in entries if f and i.decode() not in self._held]
        if out:
            await self._count(out)
        return out

    async def _count(self, batch: list[Delivery]) -> None:
        """Each of ``batch``'s deliveries so far (``XPENDING``), for entries delivered
        before (read again or claimed, which counted this delivery): ids in order."""
        o = self.options
        most = len(batch) + self.settings.consume_max_in_flight  # with those in flight
        async with redis_errors():
            got: Any = await self.redis.xpending_range(
                o.stream, o.group, batch[0].id, batch[-1].id, most, consumername=o.consumer
            )
        counts = {e["message_id"]: int(e["times_delivered"]) for e in got}
        for d in batch:
            d.deliveries = counts.get(d.id.encode(), 2)  # (at least the second)

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
        commands: list[tuple[Any, ...]] = [
            ("XADD", o.reply, "MAXLEN", "~", most, "*", "id", d.id, "answer", answer)
            for d, answer in s.answers
        ]
        for d, reason in s.dead:
            fields = [
                v
                for k, value in (d.handle or {}).items()
                if k not in (b"id", b"reason")
                for v in (k, value)
            ]
            commands.append(
                ("XADD", o.dead, "MAXLEN", "~", most, "*", "id", d.id, "reason", reason, *fields)
            )
        ids = [d.id for d, _ in s.answers] + [d.id for d, _ in s.dead]
        if ids:
            commands.append(("XACK", o.stream, o.group, *ids))
        if commands:
            await self._write(commands)
        self._held.difference_update(ids)
        self._again += s.again

    async def _write(self, commands: list[tuple[Any, ...]]) -> None:
        """``commands`` in one transaction over the pipelined connection (one round
        trip); on a cluster, whose streams may live on several nodes, pipelined alone."""
        conn = self.clients.scripts
        if isinstance(conn, ClusterConnection):
            pipe = self.redis.pipeline(transaction=False)
            for c in commands:
                pipe.execute_command(*c)
            async with redis_errors():
                await pipe.execute()
            return
        framed = (("MULTI",), *commands, ("EXEC",))
        if isinstance(conn, Connection):
            replies = await conn.together(*framed)
        else:
            replies = await conn.together([self.options.stream], *framed)
        done = replies[-1]
        for r in (*replies, *(done if isinstance(done, list) else ())):
            if isinstance(r, ReplyError):
                raise r

    async def close(self) -> None:
        return None
