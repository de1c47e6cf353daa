"""The service: models, predictions and labels, over storage and the learners.

It knows Redis only through :mod:`storage` and HTTP not at all. Every trial is one script
call (one round trip) that appends it to the model's log atomically; the worker then
replays the log up to and including that trial, which gives the answer
(:mod:`app.service.replicas`). The trial calls are in :mod:`app.service.trial_calls`; this
module holds both and adds the models themselves and their state.

Writes that are not naturally idempotent (create, delete, learn, state import) take an
:class:`~storage.repository.Idempotency`: the key and a hash of the request. A retry with
the same key and request gets the first answer; the same key with another request is a
conflict. The record is written in the same atomic step as the write it guards.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from app.core.errors import BadInput
from app.core.settings import Settings
from app.core.waiting import until
from app.service.alerts import Alerts
from app.service.backtests import Backtests
from app.service.challenger import export_model
from app.service.challengers import Challengers
from app.service.fanout import check_plan
from app.service.gather import Gathers
from app.service.live_model import LiveModel, LogRange, Start, build_model, plan_model
from app.service.replicas import LIMIT, Replicas, Warming
from app.service.trial_calls import TrialCalls
from models.core.state import InvalidState
from storage.codec import MAX_CHANGE
from storage.errors import Conflict, ModelNotFound, StorageError
from storage.jobs import JobStore
from storage.repository import (
    Idempotency,
    LogGap,
    ModelStore,
    Statistics,
    StoredModel,
    input_of,
)

__all__ = ["ModelService", "body_digest", "request_digest"]

log = logging.getLogger("committee.service")
ROLLBACK_TRIES = 20  # a rollback writes only at the log's head, so under load it may retry
DEFAULT_KEEP_MS = 86_400_000  # idempotency records of a model whose label window is unknown
SWEEP_EVERY = 30.0  # seconds between looks for deleted models' trial hashes to remove
# statistics reads of one model in flight at once, each on its own: Redis answers one in
# tens of microseconds, so a few cost little, while a read that waited for one in flight
# would take twice as long; a burst beyond them shares reads
STATS_LANES = 8


def request_digest(*parts: bytes | str) -> str:
    """A hash of a request's parts, to tell a retry from another request."""
    return str(_hashed(hashlib.blake2b(digest_size=16), parts).hexdigest())


def body_digest(op: str, name: str, body: bytes) -> str:
    """``request_digest(op, name, body)``, the hash of the first two parts kept."""
    return str(_hashed(_digest_of(op, name).copy(), (body,)).hexdigest())


@functools.lru_cache(maxsize=1024)
def _digest_of(op: str, name: str) -> Any:
    return _hashed(hashlib.blake2b(digest_size=16), (op, name))


def _hashed(h: Any, parts: Iterable[bytes | str]) -> Any:
    """``h`` updated with each part, its length first."""
    for p in parts:
        b = p.encode() if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h


def _every(name: str) -> bool:
    return True


def _keep_ms(config: dict[str, Any]) -> int:
    ttl = config.get("label_ttl")
    return int(ttl * 1000) if isinstance(ttl, int | float) and ttl > 0 else DEFAULT_KEEP_MS


class ModelService:
    """All models of one key prefix, as this worker process serves them: the models
    themselves and their state here, the copies in memory in :attr:`replicas`, the trial
    calls in :attr:`trials`."""

    def __init__(
        self, store: ModelStore, settings: Settings, warmup: Warming | None = None
    ) -> None:
        self.store = store
        self.settings = settings
        self.warmup = warmup  # awaited before the first learner is built
        self.replicas = Replicas(store, settings, warmup)
        self.trials = TrialCalls(self.replicas)
        self.challengers = Challengers(store, self.replicas, settings)
        self.alerts = Alerts(store, self.replicas, settings, self.rollback)
        self.backtests = Backtests(
            store,
            JobStore(store.client, store.prefix),
            settings,
            self.replicas.limits,
            self.starts,
            self.state_at,
            self.replicas.spawn,
            self.replicas.stopping,
        )
        self.streams = 0  # open WebSocket streams
        # reads of a model's statistics arriving while STATS_LANES are in flight share one
        self._stats: Gathers[str, None, Statistics] = Gathers(
            self._shared_statistics, 1 << 30, STATS_LANES
        )
        self._stop = asyncio.Event()
        self._sweeping: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the background work a worker does while it serves."""
        self._sweeping = asyncio.ensure_future(self._sweep_forever())
        self.alerts.start()

    async def close(self) -> None:
        """Stop the background work: the sweep after its round in flight, if any (see
        :mod:`app.core.waiting`), then the replicas' tasks (:meth:`Replicas.close`)."""
        self._stop.set()
        if self._sweeping is not None:
            try:
                await self._sweeping
            except Exception:
                log.exception("the sweep of deleted models had stopped on an error")
        await self.replicas.close()
        await self.alerts.close()
        await self.trials.fanout.aclose()

    async def _sweep_forever(self) -> None:
        while not self._stop.is_set():
            await self._sweep()
            await until(self._stop, SWEEP_EVERY)

    async def _sweep(self) -> None:
        try:
            await self.store.adopt_legacy()
            await self.store.sweep()
        except StorageError as e:
            log.warning("sweeping deleted models failed: %s", e)

    # -- models -----------------------------------------------------------------------

    async def create_model(
        self, name: str, config: dict[str, Any], idem: Idempotency | None = None
    ) -> StoredModel:
        """Check the config against the budgets, build its learner once off the event
        loop (so a config that cannot be built is refused here), and store it."""
        space, form = plan_model(config, self.replicas.limits)
        check_plan(space, self.settings)  # its experts' endpoints, if any
        if self.warmup is not None:
            await self.warmup.wait()
        await asyncio.to_thread(build_model, config, self.replicas.limits)
        s = self.settings
        made = await self.store.create(
            name,
            config,
            n_classes=len(space.labels),
            size=space.size(form),
            most=s.max_stored_models,
            idem=idem,
            keep_ms=_keep_ms(config),
        )
        zero = dict.fromkeys(("predictions", "labelled", "learned", "mistakes"), 0)
        zero |= dict.fromkeys(("updates", "expired", "late_labels", "quarantined", "refused"), 0)
        return StoredModel(name, made.incarnation, config, made.created, 0, 0, zero)

    async def list_models(self, visible: Callable[[str], bool] = _every) -> list[StoredModel]:
        """The models whose names ``visible`` accepts."""
        out = []
        for name in filter(visible, await self.store.names()):
            try:
                out.append(await self.store.read(name))
            except ModelNotFound:  # deleted meanwhile
                continue
        return out

    async def statistics(self, name: str) -> Statistics:
        """The model's statistics, read from Redis after this call began. Dashboards poll
        them, several at once: up to :data:`STATS_LANES` reads of a model go at once, each
        on its own; those arriving while that many are in flight wait, then go together
        as one read."""
        return await self._stats(name, None)

    async def _shared_statistics(self, name: str, waiting: list[None]) -> list[Statistics]:
        return [await self._read_statistics(name)] * len(waiting)

    async def _read_statistics(self, name: str) -> Statistics:
        s = await self.store.read_statistics(name, int(time.time() * 1000))
        if s.model.folded < s.model.version or s.summary_version < s.model.version:
            self.replicas.refresh_soon(name)  # e.g. the worker that appended them died
        return s

    async def all_statistics(self, visible: Callable[[str], bool] = _every) -> list[Statistics]:
        """The statistics of the models whose names ``visible`` accepts."""
        out = []
        for name in filter(visible, await self.store.names()):
            try:
                out.append(await self.statistics(name))
            except ModelNotFound:  # deleted meanwhile
                continue
        return out

    async def delete_model(self, name: str, idem: Idempotency | None = None) -> None:
        keep = DEFAULT_KEEP_MS
        with contextlib.suppress(ModelNotFound):
            keep = _keep_ms((await self.store.read(name)).config)
        m = self.replicas.evict(name)
        try:
            await self.store.delete(name, idem=idem, keep_ms=keep)
        finally:
            if m is not None:
                self.replicas.drop(m)
        self.replicas.spawn(self._sweep())

    # -- state --------------------------------------------------------------------------

    async def export_state(self, name: str) -> tuple[int, dict[str, Any]]:
        """The learner's state at its current version, exported off the event loop."""
        m = await self.replicas.fresh(name)
        async with m.frozen():
            return m.version, await asyncio.to_thread(m.learner.export_state)

    async def import_state(self, name: str, doc: Any, idem: Idempotency | None = None) -> int:
        """Replace the model's learner state; returns the log version it takes effect at."""
        for _ in range(5):
            m = await self.replicas.fresh(name)
            async with m.frozen():  # the challengers, as they are at m.version, stay
                state = await asyncio.to_thread(self._staged, m, doc)
            seq = await self._reset(m, state, idem, "state imported", "import")
            if seq is not None:
                return seq
        raise Conflict(f"model {name!r} kept changing: import its state again")

    async def _reset(
        self,
        m: LiveModel,
        state: bytes,
        idem: Idempotency | None,
        what: str,
        op: str,
        space: bytes | None = None,
    ) -> int | None:
        """Write ``state`` as the model's, after ``m``'s version, as a reset entry marked
        ``what`` (``op``: the idempotency record's operation), with the model's input
        ``space`` (None: ``m``'s). Its seq, or None when the log moved on first (``m`` is
        caught up: try again)."""
        sync, seq = await self.store.import_state(
            m.name,
            m.incarnation,
            m.version,
            state,
            m.fold_payload(),
            LIMIT,
            idem=idem,
            keep_ms=m.ttl_ms,
            seen=m.stamp,
            space=m.space_doc() if space is None else space,
            what=what,
            op=op,
        )
        if sync is None:
            self.replicas.drop(m)
            return seq
        await self.replicas.catch_up(m, sync)
        return None

    # -- versions and forks -------------------------------------------------------------

    async def starts(self, name: str) -> tuple[StoredModel, list[Start], LogRange]:
        """The model, and where it can be rebuilt from: its snapshot, the snapshot its
        last state import or rollback replaced, its creation; each with the last version
        it reaches (an import after it replaced the state), latest first."""
        stored = await self.store.read(name)
        snap = await self.store.read_snapshot(name)
        prev = await self.store.read_previous(name)
        count, first = await self.store.log_bounds(name)

        def reaches(version: int) -> bool:  # the log holds every entry after version
            return count == 0 or first <= version + 1 or version == stored.version

        starts = []
        if snap is not None and reaches(snap.version):
            starts.append(Start(snap.version, snap.state, snap.space, stored.version))
        elif snap is None and reaches(0):
            starts.append(Start(0, None, None, stored.version))
        if prev is not None and reaches(prev[0].version):
            p, until = prev
            starts.append(Start(p.version, p.state or None, p.space, until - 1))
        if snap is not None and stored.imports == 0 and reaches(0):
            starts.append(Start(0, None, None, stored.version))
        return stored, starts, LogRange(None if snap is None else snap.version, count, first)

    async def versions(self, name: str) -> dict[str, Any]:
        """The versions the model can be rebuilt at, as ranges (from its snapshot on; the
        versions before its last import or rollback from the snapshot that replaced;
        from its creation while the log holds every entry), and its latest changes."""
        stored, starts, log = await self.starts(name)
        ranges = sorted((s.version, s.until) for s in starts)
        merged: list[list[int]] = []
        for lo, hi in ranges:
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        return {
            "version": stored.version,
            "snapshot": log.snapshot,
            "log": {"first": log.first or None, "entries": log.entries},
            "restorable": [{"from": lo, "to": hi} for lo, hi in merged],
            "changes": [{"version": v, "what": w} for v, w in stored.marks],
        }

    async def state_at(
        self,
        name: str,
        version: int | None,
        learner: dict[str, Any] | None = None,
        field: str = "from.version",
    ) -> LiveModel:
        """The model as it was at ``version`` (None: now), rebuilt off the event loop from
        the latest place it can be rebuilt from (see :meth:`versions`) and its log, apart
        from the copies that serve it. With ``learner``, that learner instead, untrained
        there and trained on the log after it.

        Raises :class:`BadInput` naming ``field`` for a version it cannot be rebuilt at.
        """
        for _ in range(3):
            stored, starts, _ = await self.starts(name)
            at = stored.version if version is None else version
            usable = [s for s in starts if s.version <= at <= s.until]
            if not usable:
                ranges = ", ".join(f"{s.version} to {s.until}" for s in reversed(starts))
                raise BadInput(
                    field, f"{at}: model {name!r} can be rebuilt at {ranges or 'no version'}"
                )
            start = usable[0]
            config, space = stored.config, start.space
            if learner is not None:  # the input only: not the model's learner nor challengers
                config = {**config, "learner": learner}
                space = input_of(space)
            m = await asyncio.to_thread(
                LiveModel,
                name,
                stored.incarnation,
                config,
                version=start.version,
                state=start.state if learner is None else None,
                space=space,
                limits=self.replicas.limits,
            )
            try:
                while m.version < at:
                    entries = await self.store.read_log(name, m.version, LIMIT, upto=at)
                    if not entries:
                        raise LogGap(f"model {name!r}: no log after {m.version}")
                    await asyncio.to_thread(m.apply, entries)
            except LogGap:  # a newer snapshot trimmed the log, or an import came, meanwhile
                continue
            return m
        raise Conflict(f"model {name!r} kept changing: ask again")

    async def rollback(self, name: str, version: int, idem: Idempotency | None = None) -> int:
        """Reset the model's learner to its state at ``version``: an entry in its log (a
        reset, as an import), so the rollback is itself logged and can be rolled back.
        Experts, features and labels added since stay, entering as they did then, so
        predictions made since still take their labels. Returns the entry's seq."""
        if idem is not None:
            m = await self.replicas.fresh(name)
            seq = await self.store.earlier(name, m.incarnation, idem, "rollback")
            if seq is not None:
                return seq
        target = await self.state_at(name, version, field="version")
        for _ in range(ROLLBACK_TRIES):
            m = await self.replicas.fresh(name)
            if target.space != m.space:  # grow through the changes since, in their places
                while target.version < m.version:
                    entries = await self.store.read_log(name, target.version, LIMIT, upto=m.version)
                    if not entries:
                        raise Conflict(f"model {name!r}: its log was trimmed meanwhile: again")
                    await asyncio.to_thread(target.grow_through, entries)
                continue  # and at the head again, which may have moved meanwhile
            # the state is for the input the model has at m.version, and the write is
            # refused unless the log still ends there; the learner and the challengers
            # are those of the version rolled back to, the monitors those of now
            async with m.frozen():
                monitors = m.monitor_states()
                state = await asyncio.to_thread(
                    _exported, target.learner, target.challengers, monitors
                )
            space = m.space_doc(target.promoted or None, list(target.challengers))
            seq = await self._reset(m, state, idem, f"rolled back to {version}", "rollback", space)
            if seq is not None:
                return seq
        raise Conflict(f"model {name!r} kept changing: roll it back again")

    async def fork(
        self,
        name: str,
        source: str,
        version: int | None,
        overrides: dict[str, Any],
        idem: Idempotency | None = None,
    ) -> StoredModel:
        """Make model ``name`` from ``source`` at ``version``: its input and its learner's
        state, or (``overrides["learner"]`` given) that learner trained on the source's
        log up to there. The state is imported into the new model as its first entry."""
        learner = overrides.get("learner")
        m = await self.state_at(source, version, learner)
        config = {**m.config, **{k: v for k, v in overrides.items() if v is not None}}
        await self.create_model(name, config, idem)
        state = await asyncio.to_thread(m.learner.export_state)
        part = None if idem is None else Idempotency(f"{idem.key}/state", idem.digest)
        await self.import_state(name, state, part)
        return await self.store.read(name)

    async def change_input(
        self, name: str, change: dict[str, Any], idem: Idempotency | None = None
    ) -> int:
        """Add experts, features or labels to the model, or retire experts: a change
        entry in its log, which every worker applies in its place. Returns its seq.

        Raises :class:`BadInput` naming the offending field when the model or its learner
        cannot take the change.
        """
        raw = orjson.dumps(change)
        if len(raw) > MAX_CHANGE:
            raise BadInput("body", f"a change of {len(raw)} bytes: at most {MAX_CHANGE}")
        for _ in range(5):
            m = await self.replicas.fresh(name)
            if idem is not None:  # a retry of a change made: the first answer
                seq = await self.store.earlier(name, m.incarnation, idem, "change")
                if seq is not None:
                    return seq
            async with m.frozen():  # the learner is copied off the event loop
                space, _ = await asyncio.to_thread(m.changed_space, change)
            added = (change.get("experts") or {}).get("endpoints") or {}
            if added:  # the endpoints of the experts added, checked as at creation
                try:
                    check_plan(space, self.settings, only=added)
                except BadInput as e:
                    raise BadInput(e.field.removeprefix("input.experts."), e.message) from None
            sync, seq = await self.store.change(
                name,
                m.incarnation,
                m.version,
                raw,
                orjson.dumps(space.config()),
                (space.n_classes, space.size(m.form)),
                m.fold_payload(),
                LIMIT,
                checked=m.space_doc(),
                what=_what(change),
                idem=idem,
                keep_ms=m.ttl_ms,
                seen=m.stamp,
            )
            if sync is None:
                await self.replicas.fresh(name)  # this worker applies it before answering
                return seq
            await self.replicas.catch_up(m, sync)
        raise Conflict(f"model {name!r} kept changing: send the change again")

    @staticmethod
    def _staged(m: LiveModel, doc: Any) -> bytes:
        """``doc`` read into a copy of ``m``'s learner (which stays as it is), exported
        with ``m``'s challengers."""
        staged = m.learner.clone()
        try:
            staged.import_state(doc)
        except InvalidState as e:
            raise BadInput("state", str(e)) from None
        return orjson.dumps(export_model(staged, m.challengers, m.monitor_states()))


def _exported(learner: Any, challengers: Any, monitors: dict[str, Any]) -> bytes:
    return orjson.dumps(export_model(learner, challengers, monitors))


def _what(change: dict[str, Any]) -> str:
    """A change in a few words: "+vit -svm", "+label fox", "+feature colour"."""
    out = []
    for part, sign, list_name in (
        ("experts", "+", "add"),
        ("experts", "-", "retire"),
        ("features", "+feature ", "add"),
        ("labels", "+label ", "add"),
    ):
        names = [str(n) for n in change.get(part, {}).get(list_name) or []]
        if names:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            out.append(f"{sign}{shown}")
    return " ".join(out)[:200]
