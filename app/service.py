"""The service: models, predictions and labels, over storage and the learners.

It knows Redis only through :mod:`storage` and HTTP not at all. Every trial is one script
call (one round trip) that appends it to the model's log atomically; the worker then
replays the log up to and including that trial, which gives the answer.

Semantics a client relies on:

* A prediction is made by the hypothesis at the model's current log version (a
  prediction raced by another worker's label is made again), and is kept until the
  model's label deadline.
* A label is applied exactly once: the same label again returns the first answer and
  changes nothing; a different one is a conflict. Its ``mistake`` is judged against the
  prediction that was served; the update goes to the hypothesis current when the label
  is applied, which may have learned from other trials since.
* ``learn`` is a trial whose label is known: judged and applied at its place in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import orjson

from app.config import Settings
from app.errors import BadInput, TrialConflict, TrialExpired, TrialNotFound
from app.live import Applied, InvalidConfig, LiveModel, StateReplaced, build_model
from app.summary import summarize
from models.base import UnknownLabel
from models.instance import Attributes, Experts, InvalidInstance
from models.params import InvalidParameter
from models.state import InvalidState
from storage.codec import encode_instance
from storage.errors import Conflict, CorruptData, ModelNotFound
from storage.repository import LogGap, ModelStore, Statistics, StoredModel, Sync

__all__ = ["ModelService"]

log = logging.getLogger("committee.service")
T = TypeVar("T")
LIMIT = 2_000  # log entries returned per script reply
FLUSH_DELAY = 0.05  # seconds before outcomes of an idle model are folded
SUMMARY_EVERY = 0.5  # seconds between a worker's summaries of one model


class ModelService:
    """All models of one key prefix, as this worker process serves them."""

    def __init__(self, store: ModelStore, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self._live: dict[str, LiveModel] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._flushing: set[str] = set()

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    # -- models -----------------------------------------------------------------------

    async def create_model(self, name: str, config: dict[str, Any]) -> StoredModel:
        try:
            build_model(config)
        except InvalidConfig as e:
            raise BadInput(e.field, e.message) from None
        await self.store.create(name, config)
        return await self.store.read(name)

    async def list_models(self) -> list[StoredModel]:
        out = []
        for name in await self.store.names():
            try:
                out.append(await self.store.read(name))
            except ModelNotFound:  # deleted meanwhile
                continue
        return out

    async def statistics(self, name: str) -> Statistics:
        return await self.store.read_statistics(name, int(time.time() * 1000))

    async def all_statistics(self) -> list[Statistics]:
        out = []
        for name in await self.store.names():
            try:
                out.append(await self.statistics(name))
            except ModelNotFound:  # deleted meanwhile
                continue
        return out

    async def delete_model(self, name: str) -> None:
        self._live.pop(name, None)
        await self.store.delete(name)

    async def live(self, name: str) -> LiveModel:
        """The model in this worker's memory, loaded (snapshot, then log) if needed."""
        m = self._live.get(name)
        if m is not None:
            return m
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            m = self._live.get(name)
            for attempt in range(3):
                if m is not None:
                    break
                try:
                    m = await self._load(name)
                except LogGap:  # a newer snapshot trimmed the log meanwhile: again
                    if attempt == 2:
                        raise
            assert m is not None
            self._live[name] = m
            return m

    async def _load(self, name: str) -> LiveModel:
        stored = await self.store.read(name)
        snap = await self.store.read_snapshot(name)
        version, state = snap if snap is not None else (0, None)
        try:
            m = LiveModel(
                name,
                stored.incarnation,
                stored.config,
                version=version,
                folded=stored.folded,
                state=state,
                snapshot_every=self.settings.snapshot_every,
            )
        except (InvalidConfig, KeyError, TypeError) as e:
            raise CorruptData(f"model {name!r}: stored config is invalid: {e}") from None
        sync = await self.store.sync(name, m.incarnation, m.version, b"", LIMIT)
        m.apply(sync.entries)
        while m.version < sync.version:
            entries = await self.store.read_log(m.name, m.version, LIMIT)
            if not entries:
                raise LogGap(f"model {name!r}: log ends before version {sync.version}")
            m.apply(entries)
        m.acknowledge(sync)
        log.info("loaded model %s at version %d", name, m.version)
        return m

    def _drop(self, m: LiveModel) -> None:
        if self._live.get(m.name) is m:
            del self._live[m.name]

    async def _script(
        self, name: str, call: Callable[[LiveModel], Awaitable[T]]
    ) -> tuple[LiveModel, T]:
        """Run one script call; reload the model and retry when this worker's copy is
        of a deleted incarnation or too far behind. The script writes nothing then."""
        for attempt in range(3):
            m = await self.live(name)
            try:
                return m, await call(m)
            except (ModelNotFound, LogGap):
                self._drop(m)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def _catch_up(self, m: LiveModel, sync: Sync) -> LiveModel:
        """Replay the log up to ``sync.version``; returns the model to use from now on
        (a reloaded one if the state was replaced meanwhile)."""
        try:
            m.apply(sync.entries)
            while m.version < sync.version:
                entries = await self.store.read_log(m.name, m.version, LIMIT)
                if not entries:
                    raise LogGap(f"model {m.name!r}: log ends before version {sync.version}")
                m.apply(entries)
        except StateReplaced:
            self._drop(m)
            return await self.live(m.name)
        except LogGap:
            self._drop(m)
            raise
        m.acknowledge(sync)
        if m.unfolded:
            self._flush_later(m)
        return m

    async def _sync(self, m: LiveModel) -> LiveModel:
        sync = await self.store.sync(m.name, m.incarnation, m.version, m.fold_payload(), LIMIT)
        return await self._catch_up(m, sync)

    # -- background work ----------------------------------------------------------------

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _flush_later(self, m: LiveModel) -> None:
        """Fold this worker's outcomes soon, unless a script call does it first."""
        if m.name not in self._flushing:
            self._flushing.add(m.name)
            self._spawn(self._flush(m))

    async def _flush(self, m: LiveModel) -> None:
        """Fold outcomes and publish the summary until both are up to date."""
        try:
            await asyncio.sleep(FLUSH_DELAY)
            while True:
                if m.unfolded:
                    before = m.folded
                    m = await self._sync(m)
                    if m.unfolded and m.folded == before:
                        log.warning("model %s: outcomes after %d do not fold", m.name, before)
                        return
                if m.summary_version == m.version:
                    if not m.unfolded:
                        return
                    continue
                wait = m.summary_at + SUMMARY_EVERY - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                    continue
                m.summary_at, version = time.monotonic(), m.version
                doc = orjson.dumps(summarize(m))
                await self.store.save_summary(m.name, m.incarnation, version, doc)
                m.summary_version = version
        except Exception as e:  # the next trial's call folds them anyway
            log.warning("folding outcomes of model %s failed: %s", m.name, e)
        finally:
            self._flushing.discard(m.name)

    def _snapshot_due(self, m: LiveModel, first: int, last: int) -> None:
        """Snapshot when this worker appended the trial that completes an interval."""
        every = m.snapshot_every
        if (first - 1) // every != last // every:
            self._spawn(self._snapshot(m))

    async def _snapshot(self, m: LiveModel) -> None:
        try:
            version, state = m.version, m.export()
            if await self.store.save_snapshot(
                m.name, m.incarnation, version, state, m.fold_payload(), self.settings.log_retain
            ):
                m.snapshot_version = version
        except Exception as e:  # the next interval tries again
            log.warning("snapshot of model %s failed: %s", m.name, e)

    # -- trials -----------------------------------------------------------------------

    def _encode(self, m: LiveModel, payload: Any, field: str) -> Attributes | Experts:
        try:
            return m.encode(payload)
        except (InvalidInstance, InvalidParameter) as e:
            raise BadInput(field, str(e)) from None

    def _class(self, m: LiveModel, label: Any, field: str) -> int:
        try:
            return m.space.class_of(label)
        except UnknownLabel as e:
            raise BadInput(field, str(e)) from None

    def _scores(self, m: LiveModel, s: np.ndarray) -> dict[str, float]:
        return {str(lab): float(v) for lab, v in zip(m.labels, s.tolist(), strict=True)}

    async def predict(
        self, name: str, items: Sequence[tuple[Any, str | None]], *, track: bool = True
    ) -> list[dict[str, Any] | Exception]:
        """Predict each (instance payload, trial id or None); keep tracked ones pending."""
        m = await self.live(name)
        out: list[dict[str, Any] | Exception] = []
        xs: list[tuple[int, Attributes | Experts, str]] = []
        for i, (payload, trial_id) in enumerate(items):
            try:
                x = self._encode(m, payload, "instance")
            except BadInput as e:
                out.append(e)
                continue
            out.append({})
            xs.append((i, x, trial_id or secrets.token_hex(12)))
        if not xs:
            return out
        if not track:
            if self._stale(m):
                m = await self._fresh(name)
            for i, x, _ in xs:
                c, s = m.predict(x)
                out[i] = self._predicted(m, None, c, s, m.version)
            return out
        encoded = [encode_instance(x) for _, x, _ in xs]
        for attempt in range(4):
            m = await self.live(name)
            known = m.version
            made = [m.predict(x) for _, x, _ in xs]
            items_ = [
                (t, enc, c, s.astype("<f8").tobytes())
                for (_, _, t), enc, (c, s) in zip(xs, encoded, made, strict=True)
            ]
            try:
                sync, results = await self.store.predict(
                    name,
                    m.incarnation,
                    known,
                    strict=attempt < 3,
                    ttl_ms=m.ttl_ms,
                    fold=m.fold_payload(),
                    limit=LIMIT,
                    items=items_,
                )
            except (ModelNotFound, LogGap):
                self._drop(m)
                if attempt == 3:
                    raise
                continue
            m = await self._catch_up(m, sync)
            if results is None:  # another worker applied a trial meanwhile: predict again
                continue
            for (i, _, t), (c, s), r in zip(xs, made, results, strict=True):
                if r.status == "ok":
                    out[i] = self._predicted(m, t, c, s, known)
                elif r.status == "existing":
                    stored = np.frombuffer(r.scores, "<f8")
                    if stored.size != m.k or not 0 <= r.predicted < m.k:
                        out[i] = CorruptData(f"trial {t!r}: stored prediction is malformed")
                    else:
                        out[i] = self._predicted(m, t, r.predicted, stored, r.version)
                else:
                    out[i] = TrialConflict(
                        f"trial_id {t!r} is taken by another instance or already labelled"
                    )
            return out
        raise AssertionError("unreachable")

    def _predicted(
        self, m: LiveModel, trial_id: str | None, c: int, s: np.ndarray, version: int
    ) -> dict[str, Any]:
        return {
            "trial_id": trial_id,
            "label": m.labels[c],
            "scores": self._scores(m, s),
            "model_version": version,
        }

    def _stale(self, m: LiveModel) -> bool:
        return (time.monotonic() - m.synced_at) * 1000 > self.settings.max_staleness_ms

    async def _fresh(self, name: str) -> LiveModel:
        _, m = await self._script(name, self._sync)
        return m

    async def label(
        self, name: str, items: Sequence[tuple[str, Any]]
    ) -> list[dict[str, Any] | Exception]:
        """Label pending trials, in order; each is applied at most once."""
        m = await self.live(name)
        out: list[dict[str, Any] | Exception] = []
        todo: list[tuple[int, str, int]] = []
        for i, (trial_id, label) in enumerate(items):
            try:
                todo.append((i, trial_id, self._class(m, label, "label")))
                out.append({})
            except BadInput as e:
                out.append(e)
        if not todo:
            return out
        m, (sync, results) = await self._script(
            name,
            lambda m: self.store.label(
                name,
                m.incarnation,
                m.version,
                fold=m.fold_payload(),
                limit=LIMIT,
                items=[(t, y) for _, t, y in todo],
            ),
        )
        m = await self._catch_up(m, sync)
        applied = [r.seq for r in results if r.status == "ok"]
        if applied:
            self._snapshot_due(m, min(applied), max(applied))
        for (i, t, y), r in zip(todo, results, strict=True):
            if r.status in ("ok", "repeat"):
                updated = await self._updated(m, t, r.seq, r.updated)
                out[i] = self._labelled(m, t, r.predicted, y, updated)
            elif r.status == "conflict":
                out[i] = TrialConflict(
                    f"trial {t!r} is already labelled {m.labels[r.label]!r}"
                    if 0 <= r.label < m.k
                    else f"trial {t!r} is already labelled otherwise"
                )
            elif r.status == "expired":
                out[i] = TrialExpired(f"trial {t!r} passed its label deadline")
            else:
                out[i] = TrialNotFound(f"no pending trial {t!r} (unknown or long expired)")
        return out

    async def _updated(self, m: LiveModel, trial_id: str, seq: int, stored: int) -> bool:
        """Whether applying log entry ``seq`` updated the learner."""
        if stored >= 0:
            return bool(stored)
        got = m.recent.get(seq)
        if got is None:  # replayed elsewhere and folded meanwhile: read it back
            m = await self._sync(m)
            got = m.recent.get(seq)
        if got is None:
            u = await self.store.client.hget(self.store.keys(m.name).trial(trial_id), "u")
            if u not in (b"0", b"1"):
                raise CorruptData(f"trial {trial_id!r}: outcome of log entry {seq} is lost")
            return u == b"1"
        return got.updated

    def _labelled(
        self, m: LiveModel, trial_id: str | None, p: int, y: int, updated: bool
    ) -> dict[str, Any]:
        return {
            "trial_id": trial_id,
            "predicted": m.labels[p],
            "label": m.labels[y],
            "mistake": p != y,
            "updated": updated,
        }

    async def learn(
        self, name: str, items: Sequence[tuple[Any, Any]]
    ) -> list[dict[str, Any] | Exception]:
        """Trials whose labels are known: appended in order and learned from."""
        m = await self.live(name)
        out: list[dict[str, Any] | Exception] = []
        todo: list[tuple[int, bytes, int]] = []
        for i, (payload, label) in enumerate(items):
            try:
                x = self._encode(m, payload, "instance")
                todo.append((i, encode_instance(x), self._class(m, label, "label")))
                out.append({})
            except BadInput as e:
                out.append(e)
        if not todo:
            return out
        m, (sync, first) = await self._script(
            name,
            lambda m: self.store.learn(
                name,
                m.incarnation,
                m.version,
                fold=m.fold_payload(),
                limit=LIMIT,
                items=[(x, y) for _, x, y in todo],
            ),
        )
        m = await self._catch_up(m, sync)
        self._snapshot_due(m, first, first + len(todo) - 1)
        for seq, (i, _, y) in enumerate(todo, start=first):
            got: Applied | None = m.recent.get(seq)
            if got is None:
                out[i] = CorruptData(f"log entry {seq} was not replayed")
                continue
            out[i] = self._labelled(m, None, got.predicted, y, got.updated)
        return out

    # -- state --------------------------------------------------------------------------

    async def export_state(self, name: str) -> tuple[int, dict[str, Any]]:
        m = await self._fresh(name)
        return m.version, m.learner.export_state()

    async def import_state(self, name: str, doc: Any) -> int:
        """Replace the model's learner state; returns the log version it takes effect at."""
        for _ in range(5):
            m = await self._fresh(name)
            staged = m.learner.clone()
            try:
                staged.import_state(doc)
            except InvalidState as e:
                raise BadInput("state", str(e)) from None
            state = orjson.dumps(staged.export_state())
            sync, seq = await self.store.import_state(
                name, m.incarnation, m.version, state, m.fold_payload(), LIMIT
            )
            if sync is None:
                self._drop(m)
                return seq
            await self._catch_up(m, sync)
        raise Conflict(f"model {name!r} kept changing: import its state again")
