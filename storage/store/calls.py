"""How the model store calls Redis: one script call per step over the pipelined
connection, each durable write confirmed as ``ack`` asks, and the parts of a call every
script shares (the caller's position in the log, the outcomes it folds, the sync in its
reply)."""

from __future__ import annotations

import itertools
import os
import secrets
import time
from typing import Any

import orjson
import redis.asyncio as aioredis

from storage.client import Clients
from storage.errors import (
    CorruptData,
    LogGap,
    ModelNotFound,
    NotDurable,
    StorageError,
    Unavailable,
    redis_errors,
    refused,
)
from storage.keys import Keys, Registry
from storage.resp import ReplyError
from storage.scripts import SCRIPTS, Script
from storage.store.records import Sync, as_int, text

__all__ = [
    "ACKS",
    "DURABLE",
    "EARLIER",
    "REUSED",
    "Calls",
    "fold_keys",
    "ignored",
    "new_stamp",
    "now_ms",
    "position",
    "sync_of",
]

ACKS = ("applied", "fsync", "replicated")
CHECK_AGAIN = 5.0  # seconds before a server that failed check_server is checked again
# the scripts whose writes a durable acknowledgement waits for: the trials, the models
DURABLE = frozenset({"CHANGE", "CREATE", "DELETE", "IMPORT", "LABEL", "LEARN", "PREDICT"})
REUSED = "Idempotency-Key was used before with another request"
EARLIER = "Idempotency-Key was used with a model of this name that has been deleted since"

# Each write call marks the log entries it appends with a stamp unique to it (field
# ``w``). A worker remembers the stamp of the last entry it applied and shows it with its
# version; a script finds out so that the log at that version is no longer what the
# worker applied (a failover lost entries, and others took their places) and asks the
# worker to reload instead of going on diverged.
_STAMP_PREFIX = ""
_stamps = itertools.count()


def _stamp_this_process() -> None:
    global _STAMP_PREFIX, _stamps
    _STAMP_PREFIX = secrets.token_hex(6)
    _stamps = itertools.count()


_stamp_this_process()
os.register_at_fork(after_in_child=_stamp_this_process)  # a forked worker is another


def new_stamp() -> str:
    """A stamp no other call of any process uses: a random prefix per process and a count."""
    return f"{_STAMP_PREFIX}{next(_stamps):x}"


def position(known: int, seen: str, stamp: str = "") -> str:
    """The scripts' ``ARGV[2]``: the caller's version, the stamp of its entry there, and
    the stamp for what the call appends."""
    return f"{known}/{seen}/{stamp}"


def now_ms() -> int:
    return int(time.time() * 1000)


def ignored(fold_first: int, folded: int) -> bool:
    """Whether Redis ignored the outcomes a call reported from seq ``fold_first`` on (0:
    none), outcomes being folded up to ``folded`` after it: those before them were not
    folded yet."""
    return fold_first > folded + 1


def fold_keys(k: Keys, incarnation: str, fold: bytes) -> tuple[int, list[str]]:
    """The first seq a fold document reports (0: none) and the keys of the trials and
    records it names (declared to its script)."""
    if not fold:
        return 0, []
    try:
        doc = orjson.loads(fold)
        return int(doc["a"]), k.folded(incarnation, [e[3] for e in doc["e"]])
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, ValueError) as e:
        raise ValueError(
            f"a fold document must be {{'a': seq, 'e': [[y, p, u, id]...]}}: {e}"
        ) from None


def sync_of(reply: list[Any], stamp: str = "", fold_first: int = 0) -> Sync:
    """The sync of a script's reply; ``fold_first`` is the first seq the call's fold
    document reported (0: none), ignored by Redis when it folded none before it."""
    entries = reply[3] if len(reply) > 3 else None
    if type(entries) is not list:
        raise CorruptData(f"a script replied {reply!r:.200}: no log entries where expected")
    folded = as_int(reply[2], "folded")
    return Sync(
        as_int(reply[1], "version"), folded, list(entries), stamp, ignored(fold_first, folded)
    )


def _info(raw: Any) -> dict[str, str]:
    """The fields of an INFO reply."""
    out = {}
    for line in text(raw).splitlines():
        key, sep, value = line.partition(":")
        if sep and not key.startswith("#"):
            out[key.strip()] = value.strip()
    return out


def _config(raw: Any) -> dict[str, str]:
    """A CONFIG GET reply as a dict."""
    items = [text(v) for v in raw] if isinstance(raw, list) else []
    return dict(zip(items[::2], items[1::2], strict=False))


class Calls:
    """The script calls of one key prefix of one Redis: script calls go over the shared
    pipelined connection, the rest through redis-py (``client``)."""

    def __init__(
        self, clients: Clients, prefix: str, *, ack: str = "applied", ack_timeout_ms: int = 1000
    ) -> None:
        self.client: aioredis.Redis = clients.redis
        self.conn = clients.scripts
        self.prefix = prefix
        if ack not in ACKS:
            raise ValueError(f"ack must be one of {ACKS}, not {ack!r}")
        self.ack = ack
        self.ack_timeout_ms = ack_timeout_ms
        # sent right after each write, on its connection: the write reached a replica
        # (WAIT) or the append-only file (WAITAOF; with appendfsync always it has already)
        self._after: tuple[tuple[Any, ...], ...] = ()
        if ack == "replicated":
            self._after = (("WAIT", 1, ack_timeout_ms),)
        # when check_server last passed (> 0), or minus when it last failed (< 0)
        self._checked_at = 0.0
        self._check_failure = ""
        self.registry = Registry(prefix)
        self._keys: dict[str, Keys] = {}
        self.scripts: dict[str, Script] = dict(SCRIPTS)

    def keys(self, name: str) -> Keys:
        k = self._keys.get(name)
        if k is None:
            if len(self._keys) > 10_000:
                self._keys.clear()
            k = self._keys[name] = Keys(self.prefix, name)
        return k

    async def run(self, script: str, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run ``script`` for model ``name`` (for errors); its reply, a non-empty list.
        The statuses every script means alike become errors: gone, reload, invalid."""
        s = self.scripts[script]
        if script in DURABLE and self._checked_at <= 0:
            await self._checked()
        after = self._after if script in DURABLE else ()
        try:
            replies = await self.conn.script(s.sha, s.text, keys, args, after)
        except ReplyError as e:
            raise refused(e) from e
        reply = replies[0]
        if after:
            self._check_ack(replies[1])
        if not isinstance(reply, list) or not reply:
            raise CorruptData(f"script {script} replied {reply!r}")
        status = reply[0]
        if status == b"gone":
            raise ModelNotFound(name)
        if status == b"reload":
            raise LogGap(f"the log of model {name!r} no longer holds the entries needed")
        if status == b"invalid":
            raise CorruptData(
                f"model {name!r}: item {text(reply[2])} of group {text(reply[1])} is not "
                "this model's (a class or coordinate out of range): nothing was written"
            )
        return reply

    def _check_ack(self, got: Any) -> None:
        if isinstance(got, ReplyError):
            raise Unavailable(f"Redis could not confirm the write ({self.ack}): {got}")
        # WAIT: replicas that have the write; WAITAOF: [local fsynced, replicas fsynced]
        done = got[0] if isinstance(got, list) else got
        if not isinstance(done, int) or done < 1:
            what = "reached a replica" if self.ack == "replicated" else "reached the disk"
            raise NotDurable(
                f"the write was applied but not confirmed to have {what} within "
                f"{self.ack_timeout_ms} ms (COMMITTEE_ACK={self.ack}): send it again, "
                "retries are safe"
            )

    def require_waitaof(self) -> None:
        """Confirm fsync by WAITAOF after each write (Redis 7.2 and later)."""
        self._after = (("WAITAOF", 1, 0, self.ack_timeout_ms),)

    async def _checked(self) -> None:
        """Check the server before the first write (again at most every 5 s while the
        check fails): a write to a server that could lose it is refused as unavailable."""
        now = time.monotonic()
        if self._checked_at < 0 and now + self._checked_at < CHECK_AGAIN:
            raise Unavailable(self._check_failure)
        try:
            await self.check_server()
        except Unavailable:
            raise
        except StorageError as e:
            self._checked_at, self._check_failure = -now, str(e)
            raise Unavailable(str(e)) from e
        self._checked_at = now

    async def check_server(self) -> None:
        """Refuse a Redis that could lose acknowledged data: one that may evict keys, or
        one that cannot confirm the durability ``ack`` asks for; a :class:`StorageError`
        says what to change. Run once before serving."""
        for raw in await self._on_primaries("INFO"):
            info = _info(raw)
            where = info.get("tcp_port", "?")
            policy = info.get("maxmemory_policy", "noeviction")
            if policy != "noeviction":
                raise StorageError(
                    f"Redis (port {where}) has maxmemory-policy {policy}, which may evict "
                    "models' keys: set it to noeviction"
                )
            if self.ack == "replicated" and int(info.get("connected_slaves", "0")) < 1:
                raise StorageError(
                    f"COMMITTEE_ACK=replicated, but Redis (port {where}) has no replica: "
                    "add one, or use applied or fsync"
                )
            if self.ack == "fsync":
                if info.get("aof_enabled") != "1":
                    raise StorageError(
                        f"COMMITTEE_ACK=fsync, but Redis (port {where}) keeps no append-only "
                        "file: set appendonly yes"
                    )
                version = tuple(int(p) for p in info.get("redis_version", "0").split(".")[:2])
                if version >= (7, 2):
                    self.require_waitaof()
                    continue
                fsync = await self._on_primaries("CONFIG", "GET", "appendfsync")
                if any(_config(r).get("appendfsync") != "always" for r in fsync):
                    raise StorageError(
                        f"COMMITTEE_ACK=fsync on Redis {info.get('redis_version')} (before "
                        "7.2, which has WAITAOF) needs appendfsync always"
                    )

    async def _on_primaries(self, *args: Any) -> list[Any]:
        try:
            return await self.conn.each_primary(*args)
        except ReplyError as e:
            raise refused(e) from e

    async def ping(self) -> bool:
        async with redis_errors():
            return bool(await self.client.ping())
