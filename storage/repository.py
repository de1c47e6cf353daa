"""Repository functions over one Redis: models, trials, the log and snapshots.

Each trial is one Lua script call (:mod:`storage.scripts`): the check, the writes and the
read of the log a worker has not seen yet happen in one atomic step and one round trip.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson
import redis.asyncio as aioredis

from storage import scripts, scripts_models
from storage.client import Clients
from storage.codec import parse_int, valid_stamp
from storage.errors import (
    Conflict,
    CorruptData,
    Full,
    ModelNotFound,
    StorageError,
    Unavailable,
    redis_errors,
    refused,
)
from storage.keys import (
    LEGACY_GRAVES,
    LEGACY_MODELS,
    Keys,
    Registry,
    grave_parts,
    valid_name,
    valid_trial_id,
)
from storage.resp import ReplyError
from storage.scripts import WINDOW_POINTS
from storage.scripts_models import MARKS

__all__ = [
    "Idempotency",
    "LabelResult",
    "LearnGroup",
    "LogGap",
    "ModelStore",
    "NotDurable",
    "PredictResult",
    "RawEntry",
    "Saved",
    "Snapshot",
    "Statistics",
    "StoredModel",
    "Sync",
    "new_stamp",
    "position",
    "read_space",
    "with_space",
]

RawEntry = tuple[bytes, list[bytes]]


class NotDurable(Unavailable):
    """A write was applied but not confirmed durable (COMMITTEE_ACK) in time: a retry is
    safe (labels apply once, learns carry their idempotency key)."""


class LogGap(StorageError):
    """The log no longer reaches back to what the worker has seen: reload the model."""


@dataclass(frozen=True, slots=True)
class Sync:
    """The model's log as a script saw it: its version, how far outcomes are folded,
    and the entries after the caller's known version (at most the limit asked for).
    ``stamp`` marks the entries the call appended (see :func:`new_stamp`).
    ``fold_ignored``: the outcomes the call sent were not folded, those before them not
    being folded yet (the call that sent those failed, or reached Redis after this one)."""

    version: int
    folded: int
    entries: list[RawEntry]
    stamp: str = ""
    fold_ignored: bool = False


@dataclass(frozen=True, slots=True)
class Saved:
    """What a snapshot's script answered: whether the snapshot stands (the state kept,
    or a newer one kept already; False: outcomes up to its version are not folded yet),
    how far outcomes are folded, and whether those the call sent were ignored (as
    :attr:`Sync.fold_ignored`)."""

    kept: bool
    folded: int
    fold_ignored: bool


def _ignored(fold_first: int, folded: int) -> bool:
    """Whether Redis ignored the outcomes a call reported from seq ``fold_first`` on (0:
    none), outcomes being folded up to ``folded`` after it: those before them were not
    folded yet."""
    return fold_first > folded + 1


# Each write call marks the log entries it appends with a stamp unique to it (field
# ``w``). A worker remembers the stamp of the last entry it applied and shows it with its
# version; a script finds out so that the log at that version is no longer what the
# worker applied (a failover lost entries, and others took their places) and asks the
# worker to reload instead of going on diverged.
_STAMP_PREFIX = secrets.token_hex(6)
_stamps = itertools.count()


def new_stamp() -> str:
    """A stamp no other call of any process uses: a random prefix per process and a count."""
    return f"{_STAMP_PREFIX}{next(_stamps):x}"


def position(known: int, seen: str, stamp: str = "") -> str:
    """The scripts' ``ARGV[2]``: the caller's version, the stamp of its entry there, and
    the stamp for what the call appends."""
    return f"{known}/{seen}/{stamp}"


@dataclass(frozen=True, slots=True)
class Idempotency:
    """An ``Idempotency-Key`` and a hash of the request it came with."""

    key: str
    digest: str


@dataclass(frozen=True, slots=True)
class LearnGroup:
    """Learn items sent as one request; ``idem`` makes their appending happen once."""

    items: Sequence[tuple[bytes, int]]
    idem: Idempotency | None = None


@dataclass(frozen=True, slots=True)
class LearnResult:
    status: str  # ok | repeat | mismatch
    first: int = -1  # the first item's log seq
    count: int = 0  # items the first request appended (repeat)
    incarnation: str = ""  # the incarnation the first request appended to (repeat)
    answer: bytes = b""  # the first request's answer, once kept (repeat)


@dataclass(frozen=True, slots=True)
class Created:
    """What a create did: its time, and whether it repeats an earlier request."""

    created: int
    incarnation: str
    repeat: bool


@dataclass(frozen=True, slots=True)
class PredictResult:
    status: str  # ok | existing | conflict | full | invalid
    predicted: int = -1
    scores: bytes = b""
    version: int = -1


@dataclass(frozen=True, slots=True)
class LabelResult:
    status: str  # ok | repeat | conflict | expired | unknown | invalid
    predicted: int = -1
    seq: int = -1
    updated: int = -1  # -1: not folded yet
    label: int = -1  # the other label, for a conflict
    instance: bytes = b""  # applied: the trial's instance as the log entry keeps it


# the results that are a status alone, one of each (they are frozen)
_BARE_PREDICT = {s.encode(): PredictResult(s) for s in ("ok", "conflict", "full", "invalid")}
_BARE_LABEL = {s.encode(): LabelResult(s) for s in ("expired", "unknown", "invalid")}


@dataclass(slots=True)
class StoredModel:
    name: str
    incarnation: str
    config: dict[str, Any]
    created: int
    version: int
    folded: int
    counters: dict[str, int] = field(default_factory=dict)
    confusion: dict[tuple[int, int], int] = field(default_factory=dict)
    #: the model's input (labels and sections) since its last change; None: as made
    space: dict[str, Any] | None = None
    #: its latest changes and state imports: (the entry's seq, what it did)
    marks: list[tuple[int, str]] = field(default_factory=list)
    #: state imports and rollbacks so far (reset entries in its log)
    imports: int = 0

    @property
    def current(self) -> dict[str, Any]:
        """The config with the input the model has now."""
        return with_space(self.config, self.space)


def with_space(config: dict[str, Any], space: dict[str, Any] | None) -> dict[str, Any]:
    """``config`` with its labels and input sections replaced by ``space``'s (an input
    space's config), when given."""
    if space is None:
        return config
    sections = {k: v for k, v in space.items() if k != "labels"}
    return {**config, "labels": space["labels"], "input": sections}


def _marks(raw: Any, name: str) -> list[tuple[int, str]]:
    """A model's marks as its meta keeps them (see storage.scripts_models)."""
    if raw is None:
        return []
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise CorruptData(f"model {name!r}: its marks are not JSON") from None
    if doc == {}:  # cjson writes an empty list as an empty object
        return []
    if not isinstance(doc, list) or len(doc) > MARKS:
        raise CorruptData(f"model {name!r}: its marks are not a list of at most {MARKS}")
    out = []
    for m in doc:
        if not (
            isinstance(m, list)
            and len(m) == 2
            and type(m[0]) is int
            and m[0] > 0
            and isinstance(m[1], str)
            and len(m[1]) <= 200
        ):
            raise CorruptData(f"model {name!r}: a mark is not [seq, text]: {str(m)[:80]}")
        out.append((m[0], m[1]))
    return out


def read_space(raw: Any, what: str) -> dict[str, Any] | None:
    """A stored input (JSON of an object with labels), or None for none ('' or absent)."""
    if raw is None or raw == b"":
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise CorruptData(f"{what}: not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("labels"), list):
        raise CorruptData(f"{what}: expected an object with labels")
    return doc


class Snapshot(NamedTuple):
    """A model's kept state: its version, the learner's state document (JSON), the stamp
    of the log entry at that version and the input it has there (None: as made)."""

    version: int
    state: bytes
    stamp: str
    space: dict[str, Any] | None


@dataclass(slots=True)
class Statistics:
    """What a dashboard polls, read without any learner state."""

    model: StoredModel
    pending: int
    overdue: int  # past the deadline, not yet swept into ``expired``
    curve: list[tuple[int, int]]
    window: tuple[int, int]  # trials and mistakes among the last (up to) 1,000 folded
    summary_version: int
    summary: dict[str, Any] | None


_COUNTERS = (
    "predictions",
    "labelled",
    "learned",
    "mistakes",
    "updates",
    "expired",
    "late_labels",
    "quarantined",
    "refused",
)
_SCRIPTS = {
    name: getattr(module, name)
    for module in (scripts, scripts_models)
    for name in module.__all__
    if name.isupper() and isinstance(getattr(module, name), str) and name != "PRELUDE"
}
ACKS = ("applied", "fsync", "replicated")
CHECK_AGAIN = 5.0  # seconds before a server that failed check_server is checked again
# the scripts whose writes a durable acknowledgement waits for: the trials, the models
DURABLE = frozenset({"CHANGE", "CREATE", "DELETE", "IMPORT", "LABEL", "LEARN", "PREDICT"})
_REUSED = "Idempotency-Key was used before with another request"
_EARLIER = "Idempotency-Key was used with a model of this name that has been deleted since"
CURVES_KEPT = 4_096  # models whose last-read mistake curve and statistics are kept, parsed
GRAVE_BATCH = 1_000  # trial hashes a delete or a sweep removes in one step
# a create or delete takes less than this from its first step to its last: a registry
# entry unsettled for longer was left by a crash, and the sweep settles it
SETTLE_AFTER_MS = 60_000


def _now_ms() -> int:
    return int(time.time() * 1000)


def _info(raw: Any) -> dict[str, str]:
    """The fields of an INFO reply."""
    out = {}
    for line in _text(raw).splitlines():
        key, sep, value = line.partition(":")
        if sep and not key.startswith("#"):
            out[key.strip()] = value.strip()
    return out


def _config(raw: Any) -> dict[str, str]:
    """A CONFIG GET reply as a dict."""
    items = [_text(v) for v in raw] if isinstance(raw, list) else []
    return dict(zip(items[::2], items[1::2], strict=False))


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


_NUMBER = rb"(?:0|[1-9]\d{0,17})"  # as written: no leading zero (also JSON's rule)
_POINTS = re.compile(rb"(?:%b:%b\n)*" % (_NUMBER, _NUMBER))


def _points(raw: list[bytes], what: str) -> list[tuple[int, int]]:
    """``b"<trials>:<mistakes>"`` points, checked and converted in one pass."""
    if not raw:
        return []
    if not all(type(v) is bytes for v in raw):
        raise CorruptData(f"{what}: expected '<trials>:<mistakes>' points")
    joined = b"\n".join(raw)
    if not _POINTS.fullmatch(joined + b"\n"):
        raise CorruptData(f"{what}: expected '<trials>:<mistakes>' points")
    # checked: integers as JSON writes them
    flat = orjson.loads(b"[%b]" % joined.replace(b":", b",").replace(b"\n", b","))
    return list(zip(flat[::2], flat[1::2], strict=True))


def _window(reply: Any) -> tuple[int, int]:
    """Trials and mistakes in the sliding window, from its length and end points. Until
    the window list is full it starts at trial 0."""
    if not isinstance(reply, list) or not reply or not isinstance(reply[0], int):
        raise CorruptData("window: expected its length and end points")
    if reply[0] == 0:
        return 0, 0
    if len(reply) != 3:
        raise CorruptData("window: expected its length and end points")
    (t0, m0), (t1, m1) = _points(reply[1:], "window")
    if reply[0] < WINDOW_POINTS:
        t0, m0 = 0, 0
    return t1 - t0, m1 - m0


def _fold_keys(k: Keys, incarnation: str, fold: bytes) -> tuple[int, list[str]]:
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


# a trial script's per-item results: each status it writes and the length of the result
_RESULTS = {
    "PREDICT": {b"ok": 1, b"existing": 4, b"conflict": 1, b"full": 1, b"invalid": 1},
    "LABEL": {b"ok": 5, b"repeat": 4, b"conflict": 2, b"expired": 1, b"unknown": 1, b"invalid": 1},
    "LEARN": {b"ok": 2, b"repeat": 5, b"mismatch": 1},
}


def _results(script: str, name: str, reply: list[Any], n: int) -> list[list[Any]]:
    """The ``n`` per-item results of a trial script's ``{'ok', version, folded, entries,
    results}`` reply, each a status the script writes, of the length it writes it with;
    else :class:`CorruptData`."""
    shapes = _RESULTS[script]
    got = reply[4] if len(reply) == 5 else None
    if type(got) is list and len(got) == n:
        for r in got:
            if type(r) is not list or not r or type(r[0]) is not bytes:
                break
            if shapes.get(r[0]) != len(r):
                break
        else:
            return got
    raise CorruptData(f"model {name!r}: script {script} replied {reply!r:.200}: not its results")


def _int(v: Any, what: str) -> int:
    if isinstance(v, int):
        return v
    return parse_int(v, what)


class ModelStore:
    """Models and their trials under one key prefix of one Redis.

    Script calls go over the shared pipelined connection, the rest through redis-py.
    """

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
        # when check_server last passed (> 0), or minus when it last failed (< 0)
        self._checked_at = 0.0
        self._curves: dict[str, tuple[bytes, list[tuple[int, int]]]] = {}  # mark, points
        self._statistics: dict[str, tuple[list[Any], Statistics]] = {}
        self._check_failure = ""
        if ack == "replicated":
            self._after = (("WAIT", 1, ack_timeout_ms),)
        self.registry = Registry(prefix)
        self._keys: dict[str, Keys] = {}
        self._scripts: dict[str, tuple[str, str]] = {}
        for name, text in _SCRIPTS.items():
            self._scripts[name] = (hashlib.sha1(text.encode()).hexdigest(), text)

    def keys(self, name: str) -> Keys:
        k = self._keys.get(name)
        if k is None:
            if len(self._keys) > 10_000:
                self._keys.clear()
            k = self._keys[name] = Keys(self.prefix, name)
        return k

    async def _run(self, script: str, name: str, keys: list[str], args: list[Any]) -> Any:
        sha, text = self._scripts[script]
        if script in DURABLE and self._checked_at <= 0:
            await self._checked()
        after = self._after if script in DURABLE else ()
        try:
            replies = await self.conn.script(sha, text, keys, args, after)
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
                f"model {name!r}: item {_text(reply[2])} of group {_text(reply[1])} is not "
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

    # -- models -----------------------------------------------------------------------

    async def ping(self) -> bool:
        async with redis_errors():
            return bool(await self.client.ping())

    async def create(
        self,
        name: str,
        config: dict[str, Any],
        *,
        n_classes: int,
        size: int,
        most: int,
        idem: Idempotency | None = None,
        keep_ms: int = 86_400_000,
    ) -> Created:
        """Store a new model: list it in the registry, make its keys, settle the entry
        (see :mod:`storage.scripts_models`).

        :class:`Conflict` if the name is taken (or ``idem`` came with another request),
        :class:`Full` if ``most`` models exist already."""
        k, r = self.keys(name), self.registry
        incarnation = secrets.token_hex(8)
        reply = await self._run(
            "REGISTER", name, [r.models, r.unsettled], [name, incarnation, most, _now_ms()]
        )
        if reply[0] == b"full":
            raise Full("max_stored_models", most, f"{most} models exist: delete one first")
        keys = [*k.all_fixed(), k.idem(idem.key) if idem else k.meta]
        args = [incarnation, orjson.dumps(config), n_classes, size]
        args += [idem.digest if idem else "", keep_ms]
        try:
            reply = await self._run("CREATE", name, keys, args)
        finally:
            # whatever happened, the entry names the incarnation that exists: ours if
            # the create took, the one already there, or none
            with contextlib.suppress(StorageError):
                await self._settle(name, incarnation)
        status = reply[0]
        if status == b"exists":
            raise Conflict(f"model {name!r} already exists")
        if status == b"mismatch":
            raise Conflict(_REUSED)
        if status == b"repeat":
            return Created(_int(reply[1], "created"), _text(reply[2]), True)
        return Created(_int(reply[1], "created"), incarnation, False)

    async def _settle(self, name: str, listed: str) -> bool:
        """Make the registry entry of ``name``, if it still holds ``listed``, name the
        incarnation the model has (none: no entry); False if it changed meanwhile."""
        async with redis_errors():
            has = _text(await self.client.hget(self.keys(name).meta, "incarnation") or b"")
        r = self.registry
        reply = await self._run("SETTLE", name, [r.models, r.unsettled], [name, listed, has])
        return reply[0] == b"ok"

    async def delete(
        self, name: str, *, idem: Idempotency | None = None, keep_ms: int = 86_400_000
    ) -> None:
        """Delete a model and every key it has in one atomic step (trial hashes of a model
        with many go to a grave that :meth:`sweep` empties), then its registry entry;
        :class:`ModelNotFound` if there is none."""
        k, r = self.keys(name), self.registry
        fixed = [*k.all_fixed(), k.idem(idem.key) if idem else k.meta]
        await self._run("UNSETTLE", name, [r.models, r.unsettled], [name, _now_ms()])
        for _ in range(5):  # the model may be deleted and created again meanwhile
            async with redis_errors():
                inc = _text(await self.client.hget(k.meta, "incarnation") or b"")
            grave = k.grave(inc)
            if inc:  # listed first: a crash after the delete leaves it to the sweep
                async with redis_errors():
                    await self.client.zadd(r.graves, {grave: _now_ms()})
            # the trial hashes, when few, are deleted in the same step (declared to it)
            async with redis_errors():
                ids = [_text(t) for t in await self.client.zrange(k.trials, 0, GRAVE_BATCH)]
            if len(ids) > GRAVE_BATCH:
                ids = []
            args = [idem.digest if idem else "", keep_ms, inc, *ids]
            trials = [k.trial(inc, t) for t in ids if valid_trial_id(t)]
            if len(trials) < len(ids):  # not the service's ids: the sweep deals with them
                args, trials = args[:3], []
            try:
                reply = await self._run("DELETE", name, [*fixed, grave, *trials], args)
            except ModelNotFound:
                await self._settle_quietly(name, inc)
                raise
            if reply[0] == b"mismatch":
                raise Conflict(_REUSED)
            if reply[0] == b"moved":
                continue
            if reply[0] == b"ok":
                await self._settle_quietly(name, inc)
                if reply[1] in (0, b"0"):  # nothing went to the grave
                    async with redis_errors():
                        await self.client.zrem(r.graves, grave)
            return
        raise Conflict(f"model {name!r} kept being created again: delete it again")

    async def _settle_quietly(self, name: str, listed: str) -> None:
        # a failure leaves the entry unsettled, for the sweep
        with contextlib.suppress(StorageError):
            await self._settle(name, listed)

    async def sweep(self, budget: int = 100) -> int:
        """Delete the trial hashes of deleted models, at most ``budget`` batches, and
        settle the registry entries a crash left unsettled; returns how many graves are
        left."""
        r = self.registry
        old = _now_ms() - SETTLE_AFTER_MS
        async with redis_errors():
            stale = await self.client.zrangebyscore(r.unsettled, "-inf", old, 0, 100)
        for member in stale:
            name = _text(member)
            async with redis_errors():
                listed = _text(await self.client.hget(r.models, name) or b"")
            if not valid_name(name):
                await self._run("SETTLE", "", [r.models, r.unsettled], [name, listed, ""])
                continue
            await self._settle(name, listed)
        async with redis_errors():
            graves = [_text(g) for g in await self.client.zrange(r.graves, 0, 99)]
        for key in graves:
            parts = grave_parts(key)
            if parts is not None:
                meta, trials, inc = parts
                async with redis_errors():
                    if await self.client.hget(meta, "incarnation") == inc.encode():
                        continue  # its delete has not run yet (or never will)
                left = 1
                while left and budget > 0:
                    budget -= 1
                    async with redis_errors():
                        ids = [_text(t) for t in await self.client.zrange(key, 0, GRAVE_BATCH - 1)]
                    hashes = [trials + t for t in ids]
                    reply = await self._run("SWEEP", "", [key, *hashes], ids)
                    left = _int(reply[1], "trials left")
                if left:
                    break
            async with redis_errors():
                await self.client.zrem(r.graves, key)
        async with redis_errors():
            return int(await self.client.zcard(r.graves))

    async def adopt_legacy(self) -> None:
        """Move the single-node layout's sets of model names and graves into the
        registry (each step repeatable, for workers starting together)."""
        r = self.registry
        models = LEGACY_MODELS.format(prefix=self.prefix)
        graves = LEGACY_GRAVES.format(prefix=self.prefix)
        async with redis_errors():
            names = await self.client.smembers(models)
        for member in names:
            name = _text(member)
            if not valid_name(name):
                continue
            async with redis_errors():
                inc = await self.client.hget(self.keys(name).meta, "incarnation")
                if inc:
                    await self.client.hsetnx(r.models, name, inc)
        async with redis_errors():
            for grave in await self.client.smembers(graves):
                await self.client.zadd(r.graves, {_text(grave): 0}, nx=True)
            await self.client.delete(models)
            await self.client.delete(graves)

    async def keep_answer(self, name: str, idem: Idempotency, answer: bytes) -> None:
        """Keep the answer to the request that used ``idem`` first, for its retries."""
        await self._run(
            "IDEM_ANSWER", name, [self.keys(name).idem(idem.key)], [idem.digest, answer]
        )

    async def learn_outcomes(
        self, name: str, idem: Idempotency, seqs: Sequence[int]
    ) -> dict[int, tuple[int, bool]]:
        """The folded outcomes (predicted class, updated) of learn entries ``seqs`` that
        were appended with ``idem``, those folded so far."""
        async with redis_errors():
            got: list[Any] = await self.client.hmget(
                self.keys(name).idem(idem.key), [f"o{s}" for s in seqs]
            )
        out = {}
        for seq, v in zip(seqs, got, strict=True):
            if v is None:
                continue
            p, _, u = _text(v).partition(":")
            out[seq] = (
                parse_int(p, "folded prediction"),
                parse_int(u, "folded outcome", 0, 4) == 1,
            )
        return out

    async def names(self) -> list[str]:
        """The registry's names: every model, and perhaps some being created or deleted
        (reading one of those finds no model)."""
        async with redis_errors():
            members = await self.client.hkeys(self.registry.models)
        return sorted(n for n in map(_text, members) if valid_name(n))

    async def read(self, name: str) -> StoredModel:
        """The model's config and counters (without its learner state)."""
        async with redis_errors():
            raw = await self.client.hgetall(self.keys(name).meta)
        if not raw:
            raise ModelNotFound(name)
        return self._meta(name, raw)

    @staticmethod
    def _meta(name: str, raw: dict[Any, Any]) -> StoredModel:
        meta = {_text(k): v for k, v in raw.items()}
        try:
            config = orjson.loads(meta["config"])
            incarnation = _text(meta["incarnation"])
        except (KeyError, orjson.JSONDecodeError) as e:
            raise CorruptData(f"model {name!r}: meta lacks a valid config: {e}") from None
        if not isinstance(config, dict):
            raise CorruptData(f"model {name!r}: config is not an object")
        out = StoredModel(
            name=name,
            incarnation=incarnation,
            config=config,
            created=_int(meta.get("created", b"0"), "created"),
            version=_int(meta.get("version", b"0"), "version"),
            folded=_int(meta.get("folded", b"0"), "folded"),
            space=read_space(meta.get("input"), f"model {name!r}: its input"),
            marks=_marks(meta.get("marks"), name),
            imports=_int(meta.get("imports", b"0"), "imports"),
        )
        for c in _COUNTERS:
            out.counters[c] = _int(meta.get(c, b"0"), c)
        for key, v in meta.items():
            if key.startswith("c:"):
                parts = key.split(":")
                if len(parts) != 3:
                    raise CorruptData(f"model {name!r}: counter {key!r}")
                out.confusion[_int(parts[1], key), _int(parts[2], key)] = _int(v, key)
        return out

    async def read_statistics(self, name: str, now_ms: int) -> Statistics:
        """Counters, pending trials, the mistake curves and the learner summary, in one
        round trip. Dashboards poll them, often several at once: the statistics read last
        for each model are kept, and given again (the same object) while Redis answers the
        same."""
        held = self._curves.get(name)  # the curve is sent only when it is not this one
        args = [now_ms, held[0] if held is not None else ""]
        reply = await self._run("STATS", name, self.keys(name).all_fixed(), args)
        # what it says: the curve's mark stands for the curve, sent or not
        said = [*reply[:4], b"same", *reply[5:]]
        kept = self._statistics.get(name)
        if kept is not None and kept[0] == said:  # polled again before anything changed
            return kept[1]
        got = self._statistics_of(name, reply, held)
        if len(self._statistics) >= CURVES_KEPT:
            self._statistics.clear()
        self._statistics[name] = (said, got)
        return got

    def _statistics_of(
        self, name: str, reply: Any, held: tuple[bytes, list[tuple[int, int]]] | None
    ) -> Statistics:
        _, flat, pending, overdue, curve, window, sv, doc, mark = reply
        meta = dict(zip(flat[::2], flat[1::2], strict=True))
        doc = doc or None
        sv = sv or None
        if not meta:
            raise ModelNotFound(name)
        summary = None
        if doc is not None:
            try:
                summary = orjson.loads(doc)
            except orjson.JSONDecodeError:
                raise CorruptData(f"model {name!r}: summary is not JSON") from None
            if not isinstance(summary, dict):
                raise CorruptData(f"model {name!r}: summary is not an object")
        return Statistics(
            model=self._meta(name, meta),
            pending=int(pending),
            overdue=int(overdue),
            curve=self._curve(name, curve, mark, held),
            window=_window(window),
            summary_version=-1 if sv is None else _int(sv, "summary version"),
            summary=summary,
        )

    def _curve(
        self, name: str, raw: Any, mark: Any, held: tuple[bytes, list[tuple[int, int]]] | None
    ) -> list[tuple[int, int]]:
        """The mistake curve in ``raw``: dashboards poll it while it changes every many
        trials, so the points read last for each model are kept with the curve's mark,
        and Redis sends them again only when the mark moved (``raw`` is then ``b"same"``
        and ``held`` the points that were marked so), and then only the points after
        ``held``'s where those begin the curve (``raw`` is ``[b"+", *points]``)."""
        if not isinstance(mark, bytes) or not mark:
            raise CorruptData(f"model {name!r}: curve: no mark")
        if raw == b"same":
            if held is None or held[0] != mark:
                raise CorruptData(f"model {name!r}: curve: told it is the same as none held")
            return held[1]
        if not isinstance(raw, list):
            raise CorruptData(f"model {name!r}: curve: expected a list of points")
        if raw[:1] == [b"+"]:
            if held is None:
                raise CorruptData(f"model {name!r}: curve: sent the points after none held")
            points = held[1] + _points(raw[1:], f"model {name!r}: curve")
        else:
            points = _points(raw, f"model {name!r}: curve")
        if len(self._curves) >= CURVES_KEPT:
            self._curves.clear()
        self._curves[name] = (mark, points)
        return points

    async def save_summary(self, name: str, incarnation: str, version: int, doc: bytes) -> None:
        keys = self.keys(name).all_fixed()
        await self._run("SUMMARY", name, keys, [incarnation, version, doc])

    async def read_previous(self, name: str) -> tuple[Snapshot, int] | None:
        """The snapshot the last state import (or rollback) replaced (its state b"" for
        the creation, where there was none), and the seq of that import; None when there
        is none."""
        async with redis_errors():
            got: list[Any] = await self.client.hmget(
                self.keys(name).snapshot, "p_version", "p_state", "p_w", "p_c", "p_until"
            )
        version, state, stamp, space, until = got
        if version is None:
            return None
        if not isinstance(state, bytes):  # b"": from the creation
            raise CorruptData(f"model {name!r}: previous snapshot without state")
        kept = Snapshot(
            _int(version, "previous snapshot version"),
            state,
            valid_stamp(stamp, "previous snapshot"),
            read_space(space, f"model {name!r}: the previous snapshot's input"),
        )
        return kept, _int(until, "the seq that replaced the previous snapshot")

    async def read_snapshot(self, name: str) -> Snapshot | None:
        """The model's snapshot; None when it has none."""
        async with redis_errors():
            got: list[Any] = await self.client.hmget(
                self.keys(name).snapshot, "version", "state", "w", "c"
            )
        version, state, stamp, space = got
        if version is None:
            return None
        if not isinstance(state, bytes):
            raise CorruptData(f"model {name!r}: snapshot without state")
        return Snapshot(
            _int(version, "snapshot version"),
            state,
            valid_stamp(stamp, "snapshot"),
            read_space(space, f"model {name!r}: the snapshot's input"),
        )

    async def read_outcome(self, name: str, incarnation: str, trial_id: str) -> int | None:
        """The folded outcome of labelling ``trial_id`` (see :mod:`storage.scripts`: 0..3),
        None if not folded yet."""
        async with redis_errors():
            u = await self.client.hget(self.keys(name).trial(incarnation, trial_id), "u")
        return None if u is None else parse_int(u, "outcome", 0, 3)

    async def read_log(
        self, name: str, after: int, count: int, upto: int | None = None
    ) -> list[RawEntry]:
        """At most ``count`` log entries after seq ``after`` (and up to ``upto``)."""
        end = "+" if upto is None else f"{upto}-0"
        async with redis_errors():
            out: Any = await self.client.xrange(self.keys(name).log, f"{after + 1}-0", end, count)
        return [(i, [v for kv in f.items() for v in kv]) for i, f in out]

    async def log_bounds(self, name: str) -> tuple[int, int]:
        """(number of entries, first seq) of the model's log."""
        async with redis_errors():
            n = await self.client.xlen(self.keys(name).log)
            first: Any = await self.client.xrange(self.keys(name).log, "-", "+", 1)
        return n, (_int(first[0][0].split(b"-")[0], "log id") if first else 0)

    # -- trials -----------------------------------------------------------------------

    @staticmethod
    def _sync(reply: list[Any], stamp: str = "", fold_first: int = 0) -> Sync:
        """The sync of a script's reply; ``fold_first`` is the first seq the call's fold
        document reported (0: none), ignored by Redis when it folded none before it."""
        entries = reply[3] if len(reply) > 3 else None
        if type(entries) is not list:
            raise CorruptData(f"a script replied {reply!r:.200}: no log entries where expected")
        folded = _int(reply[2], "folded")
        return Sync(
            _int(reply[1], "version"), folded, list(entries), stamp, _ignored(fold_first, folded)
        )

    async def sync(
        self, name: str, incarnation: str, known: int, fold: bytes, limit: int, *, seen: str = ""
    ) -> Sync:
        """Fold, and read the log after ``known`` (``seen``: the stamp of the caller's
        entry at ``known``, checked; every call below takes it alike)."""
        k = self.keys(name)
        fold_first, named = _fold_keys(k, incarnation, fold)
        args = [incarnation, position(known, seen), fold, limit]
        reply = await self._run("SYNC", name, [*k.all_fixed(), *named], args)
        return self._sync(reply, "", fold_first)

    async def predict(
        self,
        name: str,
        incarnation: str,
        known: int,
        *,
        strict: bool,
        ttl_ms: int,
        fold: bytes,
        limit: int,
        most_pending: int,
        items: Sequence[tuple[str, bytes, int, bytes]],
        seen: str = "",
    ) -> tuple[Sync, list[PredictResult] | None]:
        """Store pending predictions made at version ``known``.

        Returns None for the results when ``strict`` and ``known`` is not current: catch
        up with the returned entries, predict again and retry.
        """
        k = self.keys(name)
        args: list[Any] = [incarnation, position(known, seen), "1" if strict else "0", ttl_ms]
        args += [fold, limit]
        args.append(most_pending)
        for trial_id, x, p, s in items:
            args += [trial_id, x, p, s]
        prefix = k.trial_prefix(incarnation)
        trials = [prefix + t[0] for t in items]
        fold_first, named = _fold_keys(k, incarnation, fold)
        reply = await self._run("PREDICT", name, [*k.all_fixed(), *trials, *named], args)
        sync = self._sync(reply, "", fold_first)
        if reply[0] == b"stale":
            return sync, None
        out = []
        for r in _results("PREDICT", name, reply, len(items)):
            if r[0] == b"existing":
                if type(r[2]) is not bytes:
                    raise CorruptData(f"model {name!r}: a pending trial's scores are {r[2]!r:.50}")
                out.append(
                    PredictResult("existing", _int(r[1], "prediction"), r[2], _int(r[3], "version"))
                )
            else:
                out.append(_BARE_PREDICT[r[0]])
        return sync, out

    async def label(
        self,
        name: str,
        incarnation: str,
        known: int,
        *,
        fold: bytes,
        limit: int,
        items: Sequence[tuple[str, int]],
        seen: str = "",
    ) -> tuple[Sync, list[LabelResult]]:
        """Apply each (trial id, class) to the pending trial, at most once.

        The sync's entries stop before the first label applied: the caller replays its
        own from the results (each applied one's instance as the log keeps it, its
        class and the prediction served), as :meth:`learn`'s caller does."""
        k = self.keys(name)
        stamp = new_stamp()
        args: list[Any] = [incarnation, position(known, seen, stamp), fold, limit]
        for trial_id, y in items:
            args += [trial_id, y]
        prefix = k.trial_prefix(incarnation)
        trials = [prefix + t[0] for t in items]
        fold_first, named = _fold_keys(k, incarnation, fold)
        reply = await self._run("LABEL", name, [*k.all_fixed(), *trials, *named], args)
        out = []
        for (trial_id, _), r in zip(items, _results("LABEL", name, reply, len(items)), strict=True):
            status = _text(r[0])
            if status == "ok":
                if len(r) < 5 or not all(isinstance(v, bytes) for v in r[3:]):
                    raise CorruptData(f"model {name!r}: label of {trial_id!r}: reply {r!r:.200}")
                p, seq = _int(r[1], "prediction"), _int(r[2], "seq")
                out.append(LabelResult("ok", p, seq, instance=r[3]))
            elif status == "repeat":
                u = -1 if r[3] in (b"", None) else _int(r[3], "updated")
                out.append(LabelResult("repeat", _int(r[1], "prediction"), _int(r[2], "seq"), u))
            elif status == "conflict":
                out.append(LabelResult("conflict", label=_int(r[1], "label")))
            else:
                out.append(_BARE_LABEL[r[0]])
        sync = self._sync(reply, stamp, fold_first)
        # the labels applied are the log's last entries, in order
        applied = [r.seq for r in out if r.status == "ok"]
        if applied != list(range(sync.version - len(applied) + 1, sync.version + 1)):
            raise CorruptData(
                f"model {name!r}: labels applied as log entries {applied[:4]} ending the "
                f"log at {sync.version}"
            )
        return sync, out

    async def learn(
        self,
        name: str,
        incarnation: str,
        known: int,
        *,
        fold: bytes,
        limit: int,
        keep_ms: int,
        groups: Sequence[LearnGroup],
        seen: str = "",
    ) -> tuple[Sync, list[LearnResult]]:
        """Append trials with known labels, each group at most once per idempotency key.

        The sync's entries stop before the first appended item: the caller applies its
        own items."""
        k = self.keys(name)
        keys = k.all_fixed()
        stamp = new_stamp()
        args: list[Any] = [incarnation, position(known, seen, stamp), fold, limit, keep_ms]
        for g in groups:
            if g.idem is not None:
                keys.append(k.idem(g.idem.key))
            args += [g.idem.key if g.idem else "", g.idem.digest if g.idem else ""]
            args.append(len(g.items))
            for x, y in g.items:
                args += [x, y]
        fold_first, named = _fold_keys(k, incarnation, fold)
        reply = await self._run("LEARN", name, [*keys, *named], args)
        out = []
        for r in _results("LEARN", name, reply, len(groups)):
            status = _text(r[0])
            if status == "ok":
                out.append(LearnResult("ok", _int(r[1], "first seq")))
            elif status == "repeat":
                first, count = _int(r[1], "first seq"), _int(r[2], "count")
                out.append(LearnResult("repeat", first, count, _text(r[3]), r[4] or b""))
            else:
                out.append(LearnResult("mismatch"))
        return self._sync(reply, stamp, fold_first), out

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
        the log no longer holds raises :class:`LogGap` and is not kept."""
        k = self.keys(name)
        fold_first, named = _fold_keys(k, incarnation, fold)
        args = [incarnation, position(version, seen), state, fold, retain, space]
        reply = await self._run("SNAPSHOT", name, [*k.all_fixed(), *named], args)
        kept = reply[0] == b"ok"
        if reply[0] not in (b"ok", b"unfolded") or len(reply) < 2 + kept:
            raise CorruptData(f"script SNAPSHOT replied {reply!r:.200}")
        folded = _int(reply[2] if kept else reply[1], "folded")
        return Saved(kept, folded, _ignored(fold_first, folded))

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
        k = self.keys(name)
        keys = [*k.all_fixed(), k.idem(idem.key) if idem else k.meta]
        keys += _fold_keys(k, incarnation, fold)[1]
        args = [incarnation, position(known, seen, new_stamp()), state, fold, limit]
        args += [idem.digest if idem else "", keep_ms, space, what, op]
        return self._appended(await self._run("IMPORT", name, keys, args), incarnation)

    def _appended(self, reply: Any, incarnation: str) -> tuple[Sync | None, int]:
        """What a keyed write of one entry (IMPORT, CHANGE) replied: (None, its seq), or
        (the sync to catch up with, -1)."""
        if reply[0] == b"stale":
            return self._sync(reply), -1
        if reply[0] == b"mismatch":
            raise Conflict(_REUSED)
        if reply[0] == b"repeat" and _text(reply[2]) != incarnation:
            raise Conflict(_EARLIER)
        return None, _int(reply[1], "seq")

    async def earlier(self, name: str, incarnation: str, idem: Idempotency, op: str) -> int | None:
        """The seq a write ``op`` made under ``idem`` when it was made (a retry), None
        when no write was; :class:`Conflict` when the key was used for another request."""
        async with redis_errors():
            got: list[Any] = await self.client.hmget(
                self.keys(name).idem(idem.key), "op", "h", "a", "inc"
            )
        if got[0] is None:
            return None
        if _text(got[0]) != op or _text(got[1]) != idem.digest:
            raise Conflict(_REUSED)
        if _text(got[3]) != incarnation:
            raise Conflict(_EARLIER)
        return _int(got[2], "the seq of an earlier write")

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
        k = self.keys(name)
        keys = [*k.all_fixed(), k.idem(idem.key) if idem else k.meta]
        keys += _fold_keys(k, incarnation, fold)[1]
        args = [incarnation, position(known, seen, new_stamp()), change, fold, limit]
        args += [idem.digest if idem else "", keep_ms, space, sizes[0], sizes[1], checked, what]
        return self._appended(await self._run("CHANGE", name, keys, args), incarnation)
