"""A model's history: its log, its snapshots, and the writes that replace its state
(imports and rollbacks) or change its input, each appending one entry to the log."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis

from storage.codec import valid_stamp
from storage.errors import Conflict, CorruptData, redis_errors
from storage.store.calls import (
    EARLIER,
    REUSED,
    Calls,
    fold_keys,
    ignored,
    new_stamp,
    position,
    sync_of,
)
from storage.store.records import (
    Idempotency,
    RawEntry,
    Saved,
    Snapshot,
    Sync,
    as_int,
    read_space,
    text,
)

__all__ = ["History"]


class History:
    """The logs and snapshots of the models of one key prefix."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    async def read_log(
        self, name: str, after: int, count: int, upto: int | None = None
    ) -> list[RawEntry]:
        """At most ``count`` log entries after seq ``after`` (and up to ``upto``)."""
        end = "+" if upto is None else f"{upto}-0"
        c = self.calls
        async with redis_errors():
            out: Any = await c.client.xrange(c.keys(name).log, f"{after + 1}-0", end, count)
        return [(i, [v for kv in f.items() for v in kv]) for i, f in out]

    async def read_log_fields(
        self, name: str, after: int, count: int, upto: int | None = None
    ) -> list[RawEntry]:
        """:meth:`read_log`'s entries with each field list as the reply holds it, with
        no dict made of it (a field written twice, which the service never does, is
        there twice, where :meth:`read_log` keeps the last)."""
        c = self.calls
        if isinstance(c.client, aioredis.RedisCluster):
            # the cluster client routes a command by its str name: read_log's form
            return await self.read_log(name, after, count, upto)
        end = "+" if upto is None else f"{upto}-0"
        async with redis_errors():
            # the command named in bytes: redis-py's reply callbacks are keyed by str
            # names, so the reply comes as the server sends it
            out: Any = await c.client.execute_command(
                b"XRANGE", c.keys(name).log, f"{after + 1}-0", end, b"COUNT", count
            )
        if out and not isinstance(out[0][1], list):  # a callback made dicts after all
            return [(i, [v for kv in f.items() for v in kv]) for i, f in out]
        return out

    async def log_bounds(self, name: str) -> tuple[int, int]:
        """(number of entries, first seq) of the model's log."""
        c = self.calls
        async with redis_errors():
            n = await c.client.xlen(c.keys(name).log)
            first: Any = await c.client.xrange(c.keys(name).log, "-", "+", 1)
        return n, (as_int(first[0][0].split(b"-")[0], "log id") if first else 0)

    async def records(self, name: str, keys: Sequence[str]) -> list[tuple[str, str, str] | None]:
        """(operation, request hash, incarnation) of the idempotency record of each of
        ``keys``, None where there is none."""
        c = self.calls
        async with redis_errors(), c.client.pipeline(transaction=False) as p:
            for key in keys:
                p.hmget(c.keys(name).idem(key), "op", "h", "inc")
            got: list[Any] = await p.execute()
        return [None if r[0] is None else (text(r[0]), text(r[1]), text(r[2])) for r in got]

    async def save_snapshot(
        self,
        name: str,
        incarnation: str,
        version: int,
        state: bytes,
        fold: bytes,
        retain: int,
        *,
        seen: str = "",
        space: bytes = b"",
    ) -> Saved:
        """Keep ``state`` as the model at ``version`` if newer (not while outcomes up to
        ``version`` are not folded yet). ``fold`` holds outcomes up to ``version`` at
        most, and ``seen`` is the stamp of the entry there: a state learned from entries
        the log no longer holds raises :class:`~storage.errors.LogGap` and is not kept."""
        k = self.calls.keys(name)
        fold_first, named = fold_keys(k, incarnation, fold)
        args = [incarnation, position(version, seen), state, fold, retain, space]
        reply = await self.calls.run("SNAPSHOT", name, [*k.all_fixed(), *named], args)
        kept = reply[0] == b"ok"
        if reply[0] not in (b"ok", b"unfolded") or len(reply) < 2 + kept:
            raise CorruptData(f"script SNAPSHOT replied {reply!r:.200}")
        folded = as_int(reply[2] if kept else reply[1], "folded")
        return Saved(kept, folded, ignored(fold_first, folded))

    async def read_snapshot(self, name: str) -> Snapshot | None:
        """The model's snapshot; None when it has none."""
        c = self.calls
        async with redis_errors():
            got: list[Any] = await c.client.hmget(
                c.keys(name).snapshot, "version", "state", "w", "c"
            )
        version, state, stamp, space = got
        if version is None:
            return None
        if not isinstance(state, bytes):
            raise CorruptData(f"model {name!r}: snapshot without state")
        return Snapshot(
            as_int(version, "snapshot version"),
            state,
            valid_stamp(stamp, "snapshot"),
            read_space(space, f"model {name!r}: the snapshot's input"),
        )

    async def read_previous(self, name: str) -> tuple[Snapshot, int] | None:
        """The snapshot the last state import (or rollback) replaced (its state b"" for
        the creation, where there was none), and the seq of that import; None when there
        is none."""
        c = self.calls
        async with redis_errors():
            got: list[Any] = await c.client.hmget(
                c.keys(name).snapshot, "p_version", "p_state", "p_w", "p_c", "p_until"
            )
        version, state, stamp, space, until = got
        if version is None:
            return None
        if not isinstance(state, bytes):  # b"": from the creation
            raise CorruptData(f"model {name!r}: previous snapshot without state")
        kept = Snapshot(
            as_int(version, "previous snapshot version"),
            state,
            valid_stamp(stamp, "previous snapshot"),
            read_space(space, f"model {name!r}: the previous snapshot's input"),
        )
        return kept, as_int(until, "the seq that replaced the previous snapshot")

    async def import_state(
        self,
        name: str,
        incarnation: str,
        known: int,
        state: bytes,
        fold: bytes,
        limit: int,
        *,
        idem: Idempotency | None = None,
        keep_ms: int = 86_400_000,
        seen: str = "",
        space: bytes = b"",
        what: str = "state imported",
        op: str = "import",
    ) -> tuple[Sync | None, int]:
        """Replace the learner state after version ``known``; returns (None, its seq), or
        (the sync to catch up with, -1) when ``known`` is not current and fully folded.
        A retry with ``idem`` returns the first request's seq. ``space`` is the model's
        input now (b"": as made); ``what`` marks the entry, ``op`` names the operation in
        its idempotency record ("import", "rollback")."""
        k = self.calls.keys(name)
        keys = [*k.all_fixed(), k.idem(idem.key) if idem else k.meta]
        keys += fold_keys(k, incarnation, fold)[1]
        args = [incarnation, position(known, seen, new_stamp()), state, fold, limit]
        args += [idem.digest if idem else "", keep_ms, space, what, op]
        return self._appended(await self.calls.run("IMPORT", name, keys, args), incarnation)

    async def change(
        self,
        name: str,
        incarnation: str,
        known: int,
        change: bytes,
        space: bytes,
        sizes: tuple[int, int],
        fold: bytes,
        limit: int,
        *,
        checked: bytes = b"",
        what: str = "",
        idem: Idempotency | None = None,
        keep_ms: int = 86_400_000,
        seen: str = "",
    ) -> tuple[Sync | None, int]:
        """Append a change of the model's input, checked against the input ``checked``
        (b"": as made) the model had at version ``known``: ``change`` as the log keeps
        it, ``space`` the input after it, ``sizes`` its (labels, input size) and
        ``what`` a few words for the model's marks. Returns
        (None, its seq), or (the sync to catch up with, -1) when another change came
        first. A retry with ``idem`` returns the first seq."""
        k = self.calls.keys(name)
        keys = [*k.all_fixed(), k.idem(idem.key) if idem else k.meta]
        keys += fold_keys(k, incarnation, fold)[1]
        args = [incarnation, position(known, seen, new_stamp()), change, fold, limit]
        args += [idem.digest if idem else "", keep_ms, space, sizes[0], sizes[1], checked, what]
        return self._appended(await self.calls.run("CHANGE", name, keys, args), incarnation)

    @staticmethod
    def _appended(reply: Any, incarnation: str) -> tuple[Sync | None, int]:
        """What a keyed write of one entry (IMPORT, CHANGE) replied: (None, its seq), or
        (the sync to catch up with, -1)."""
        if reply[0] == b"stale":
            return sync_of(reply), -1
        if reply[0] == b"mismatch":
            raise Conflict(REUSED)
        if reply[0] == b"repeat" and text(reply[2]) != incarnation:
            raise Conflict(EARLIER)
        return None, as_int(reply[1], "seq")

    async def earlier(self, name: str, incarnation: str, idem: Idempotency, op: str) -> int | None:
        """The seq a write ``op`` made under ``idem`` when it was made (a retry), None
        when no write was; :class:`Conflict` when the key was used for another request."""
        c = self.calls
        async with redis_errors():
            got: list[Any] = await c.client.hmget(
                c.keys(name).idem(idem.key), "op", "h", "a", "inc"
            )
        if got[0] is None:
            return None
        if text(got[0]) != op or text(got[1]) != idem.digest:
            raise Conflict(REUSED)
        if text(got[3]) != incarnation:
            raise Conflict(EARLIER)
        return as_int(got[2], "the seq of an earlier write")
