"""The models one worker holds in memory, kept in step with their logs in Redis.

A worker loads a model from its latest snapshot and the log after it, then replays every
entry any worker appends (the replies of the trial scripts carry them). It folds the
outcomes it computes into the shared counters, publishes what dashboards show of the
learner, and writes a snapshot when it appended the trial that completes an interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Iterable
from typing import Protocol, TypeVar

import orjson

from app.core.errors import BadInput
from app.core.settings import Settings
from app.core.waiting import until
from app.service.budget import Limits
from app.service.live_model import RESEND, Kept, LiveModel, StateReplaced
from app.service.summary import summarize
from models.core.instance import Attributes, Experts
from storage.errors import CorruptData, ModelNotFound
from storage.repository import LogGap, ModelStore, Sync

__all__ = ["LIMIT", "TRIAL_LIMIT", "Replicas", "Warming"]

log = logging.getLogger("committee.replicas")


class Warming(Protocol):
    """What the service waits for before it builds a learner (app.service.warmup)."""

    async def wait(self) -> None: ...


T = TypeVar("T")
Instance = tuple[Attributes | Experts, int]
Own = tuple[int, list[Instance], str]
OwnLabels = tuple[int, list[tuple[bytes, int, int, str]]]
LIMIT = 2_000  # log entries read per call when catching up
# log entries a trial's script returns: often this worker's own concurrent requests,
# applied by them meanwhile, so only a few are worth carrying back
TRIAL_LIMIT = 128
FLUSH_DELAY = 0.05  # seconds before outcomes of an idle model are folded
SUMMARY_EVERY = 0.5  # seconds between a worker's summaries of one model
GRACE = 5.0  # seconds a stopping worker lets its background tasks finish


class Replicas:
    """This worker's copies of the models of one key prefix."""

    def __init__(
        self, store: ModelStore, settings: Settings, warmup: Warming | None = None
    ) -> None:
        self.store = store
        self.settings = settings
        self.limits = Limits.of(settings)
        self.warmup = warmup  # awaited before the first learner is built
        self._live: dict[str, LiveModel] = {}
        self._loading: dict[str, asyncio.Future[LiveModel]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._flushing: set[str] = set()
        self._refreshed: dict[str, float] = {}
        self._clock = 0  # counts uses, for evicting the least recently used model
        # the instances of the predictions this worker stored, for their labels
        self.kept = Kept(settings.kept_bytes)
        # set when the worker stops: background tasks end at their next pause
        self.stopping = asyncio.Event()

    async def close(self) -> None:
        """Stop the background tasks: asked first (see :mod:`app.core.waiting`), so that a
        fold or a snapshot in flight completes and a pending fold goes at once; only
        those still running after :data:`GRACE` seconds are cancelled."""
        self.stopping.set()
        deadline = time.monotonic() + GRACE
        while self._tasks and (left := deadline - time.monotonic()) > 0:
            await asyncio.wait(list(self._tasks), timeout=left)
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    async def live(self, name: str) -> LiveModel:
        """The model in this worker's memory, loaded (snapshot, then log) if needed.

        Concurrent requests for a model being loaded share one load; a name that does
        not exist leaves nothing behind. At most ``settings.max_models`` stay in memory;
        the least recently used goes first (its log stays in Redis, and it is loaded
        again when next used)."""
        m = self._live.get(name)
        if m is None:
            loading = self._loading.get(name)
            if loading is None:
                loading = asyncio.ensure_future(self._load_once(name))
                self._loading[name] = loading
                loading.add_done_callback(lambda f: self._loaded(name, f))
            m = await asyncio.shield(loading)
        m.used = self._clock = self._clock + 1
        return m

    def _loaded(self, name: str, f: asyncio.Future[LiveModel]) -> None:
        if self._loading.get(name) is f:
            del self._loading[name]
        if f.cancelled() or f.exception() is not None:
            return
        self._live[name] = m = f.result()
        m.used = self._clock = self._clock + 1
        if len(self._live) > self.settings.max_models:
            oldest = min(self._live.values(), key=lambda lm: lm.used)
            del self._live[oldest.name]
            log.info("model %s left this worker's memory", oldest.name)

    async def _load_once(self, name: str) -> LiveModel:
        for attempt in range(3):
            try:
                return await self._load(name)
            except LogGap:  # a newer snapshot trimmed the log meanwhile: again
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def _load(self, name: str) -> LiveModel:
        """Build the learner from its snapshot and replay the log after it, off the event
        loop (the model is nobody else's until it is returned)."""
        if self.warmup is not None:
            await self.warmup.wait()
        stored = await self.store.read(name)
        snap = await self.store.read_snapshot(name)
        version, state, stamp, space = (0, None, "", None) if snap is None else snap
        try:
            m = await asyncio.to_thread(
                LiveModel,
                name,
                stored.incarnation,
                stored.config,
                version=version,
                folded=stored.folded,
                state=state,
                stamp=stamp,
                snapshot_every=self.settings.snapshot_every,
                limits=self.limits,
                space=space,
            )
        except (BadInput, KeyError, TypeError) as e:
            raise CorruptData(f"model {name!r}: stored config is invalid: {e}") from None
        sync = await self.store.sync(name, m.incarnation, m.version, b"", LIMIT, seen=m.stamp)
        await asyncio.to_thread(m.apply, sync.entries)
        await self._read_log(m, sync.version, off_loop=True)
        m.acknowledge(sync)
        log.info("loaded model %s at version %d", name, m.version)
        return m

    def held(self) -> list[LiveModel]:
        """The models this worker holds now."""
        return list(self._live.values())

    def drop(self, m: LiveModel) -> None:
        """Forget this copy of a model (a later use loads it again)."""
        if self._live.get(m.name) is m:
            del self._live[m.name]

    def evict(self, name: str) -> LiveModel | None:
        """Forget whatever copy of ``name`` is in memory; returns it."""
        return self._live.pop(name, None)

    async def catch_up(
        self,
        m: LiveModel,
        sync: Sync,
        own: list[Own] | None = None,
        labels: OwnLabels | None = None,
    ) -> LiveModel:
        """Replay the log up to ``sync.version``; returns the model to use from now on
        (a reloaded one if the state was replaced meanwhile, or the replay failed here).
        ``own`` are runs of learn entries this worker appended, applied from memory:
        (first seq, [(instance, class)], idempotency key or ""); ``labels`` the label
        entries it appended, from what the script answered: (first seq, [(instance as
        stored, class, prediction served, trial id)])."""
        try:
            await m.thawed()
            m.apply(sync.entries, self.kept.take)
            for first, items, keys in _runs(own or ()):
                await self._read_log(m, first - 1)
                await m.thawed()
                m.apply_own(first, items, keys, sync.stamp)
            if labels is not None:
                await self._read_log(m, labels[0] - 1)
                await m.thawed()
                m.apply_labels(labels[0], labels[1], sync.stamp, self.kept.take)
            await self._read_log(m, sync.version)
        except StateReplaced:
            self.drop(m)
            return await self.live(m.name)
        except LogGap:
            self.drop(m)
            raise
        m.acknowledge(sync)
        if m.unfolded:
            self._flush_later(m)
        return m

    async def _read_log(self, m: LiveModel, upto: int, off_loop: bool = False) -> None:
        while m.version < upto:
            entries = await self.store.read_log(m.name, m.version, LIMIT, upto)
            if not entries:
                raise LogGap(f"model {m.name!r}: log ends before version {upto}")
            if off_loop:
                await asyncio.to_thread(m.apply, entries)
            else:
                await m.thawed()
                m.apply(entries, self.kept.take)

    async def sync(self, m: LiveModel) -> LiveModel:
        """Fold this worker's outcomes and replay what the log holds beyond ``m``."""
        sync = await self.store.sync(
            m.name, m.incarnation, m.version, m.fold_payload(), LIMIT, seen=m.stamp
        )
        return await self.catch_up(m, sync)

    # -- background work ----------------------------------------------------------------

    def spawn(self, coro: Awaitable[None]) -> None:
        """Run ``coro`` in the background until it ends; :meth:`close` waits for it."""
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def refresh_soon(self, name: str) -> None:
        """Bring a model's counters and summary up to date in the background, at most
        once a second per model: this worker replays what it has not seen, folds the
        outcomes nobody folded and publishes the summary."""
        now = time.monotonic()
        if now - self._refreshed.get(name, -1.0) < 1.0:
            return
        self._refreshed[name] = now

        async def refresh() -> None:
            try:
                m = await self.sync(await self.live(name))
                self._flush_later(m)
            except Exception as e:
                log.warning("refreshing model %s failed: %s", name, e)

        self.spawn(refresh())

    def _flush_later(self, m: LiveModel) -> None:
        """Fold this worker's outcomes soon, unless a script call does it first."""
        if m.name not in self._flushing:
            self._flushing.add(m.name)
            self.spawn(self._flush(m))

    async def _flush(self, m: LiveModel) -> None:
        """Fold outcomes and publish the summary until both are up to date."""
        try:
            await until(self.stopping, FLUSH_DELAY)
            stuck = 0
            while True:
                serving = self._live.get(m.name)
                if serving is not None and serving is not m:
                    # replaced meanwhile (a rollback, a state import, a reload): the copy
                    # that serves now holds the outcomes to fold, and its calls found this
                    # flush under way rather than starting their own
                    m, stuck = serving, 0
                if m.unfolded:
                    before = m.folded
                    m = await self.sync(m)
                    if m.unfolded and m.folded == before:  # sent but not folded: resend
                        stuck += 1
                        if stuck > 3:
                            log.warning("model %s: outcomes after %d do not fold", m.name, before)
                            return
                        await until(self.stopping, RESEND)
                        continue
                if m.summary_version == m.version:
                    if not m.unfolded:
                        return
                    continue
                wait = m.summary_at + SUMMARY_EVERY - time.monotonic()
                if wait > 0 and not self.stopping.is_set():
                    await until(self.stopping, wait)
                    continue
                m.summary_at, version = time.monotonic(), m.version
                doc = orjson.dumps(summarize(m))
                await self.store.save_summary(m.name, m.incarnation, version, doc)
                m.summary_version = version
        except Exception as e:  # the next trial's call folds them anyway
            log.warning("folding outcomes of model %s failed: %s", m.name, e)
        finally:
            self._flushing.discard(m.name)

    def snapshot_due(self, m: LiveModel, first: int, last: int) -> None:
        """Snapshot when this worker appended the trial that completes an interval."""
        every = m.snapshot_every
        if (first - 1) // every != last // every:
            self.spawn(self._snapshot(m))

    async def _snapshot(self, m: LiveModel) -> None:
        try:
            async with m.frozen():  # exported off the event loop, unchanged meanwhile
                if m.broken:  # its state is not the one its version names
                    return
                version, stamp = m.version, m.stamp
                state, space = await asyncio.to_thread(m.kept_state), m.space_doc()
            # made as it is sent: Redis folds outcomes in order, and would ignore those
            # that trial calls sent during the export report had this payload, sent after
            # them, taken the earlier ones. They stop at the state's version, which the
            # script checks against the stamp of the log entry there
            fold = m.fold_payload(upto=version)
            saved = await self.store.save_snapshot(
                m.name,
                m.incarnation,
                version,
                state,
                fold,
                self.settings.log_retain,
                seen=stamp,
                space=space,
            )
            m.acknowledge(saved)
            if saved.kept:
                m.snapshot_version = version
        except LogGap:  # this copy learned from entries the log no longer holds
            log.warning("model %s: the log changed under this worker's copy; reloading", m.name)
            self.drop(m)
        except Exception as e:  # the next interval tries again
            log.warning("snapshot of model %s failed: %s", m.name, e)

    def stale(self, m: LiveModel) -> bool:
        """Whether ``m`` was synced longer ago than ``max_staleness_ms``."""
        return (time.monotonic() - m.synced_at) * 1000 > self.settings.max_staleness_ms

    async def fresh(self, name: str) -> LiveModel:
        """The model, caught up with its log now (reloaded when this worker's copy is of
        a deleted incarnation or too far behind)."""
        for attempt in range(3):
            m = await self.live(name)
            try:
                return await self.sync(m)
            except (ModelNotFound, LogGap):
                self.drop(m)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


def _runs(own: Iterable[Own]) -> list[tuple[int, list[Instance], list[str]]]:
    """``own`` with each run that follows the one before in the log put into it (as a
    batch's requests, each under its own key, are appended), each entry's key beside it:
    one replay of a long run rather than many of one entry each."""
    out: list[tuple[int, list[Instance], list[str]]] = []
    for first, items, key in own:
        items = list(items)
        if out and out[-1][0] + len(out[-1][1]) == first:
            out[-1][1].extend(items)
            out[-1][2].extend([key] * len(items))
        else:
            out.append((first, items, [key] * len(items)))
    return out
