"""Backtests as jobs: planned and checked while the request waits, run in the background
by the worker that took them, their progress and result kept in Redis
(:mod:`storage.jobs`) so that any worker answers ``GET /v1/jobs/{id}``.

A request waits up to ``wait`` seconds for its backtest; one that takes longer is
answered with the job as it runs. What a backtest computes is in :mod:`app.service.replay`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from app.core.errors import BadInput
from app.core.settings import Settings
from app.service.budget import Limits
from app.service.live_model import LiveModel, LogRange, Start, plan_model
from app.service.replay import Replay, Run
from storage.errors import Conflict, CorruptData, Full, StorageError
from storage.jobs import MAX_JOB_BYTES, JobStore
from storage.repository import (
    Idempotency,
    LogGap,
    ModelStore,
    StoredModel,
    input_of,
    with_space,
)

__all__ = ["Backtests"]

log = logging.getLogger("committee.jobs")
CHUNK = 2_048  # log entries read per step
SAVE_EVERY = 0.5  # seconds between writes of a running job's progress
SILENT_MS = 120_000  # a running job not written for this long lost its worker
MAX_SPECS = MAX_JOB_BYTES // 4  # bytes of candidate specs a job keeps
STOPPED = "the worker running it stopped"

Starts = Callable[[str], Awaitable[tuple[StoredModel, list[Start], LogRange]]]
StateAt = Callable[..., Awaitable[LiveModel]]


@dataclass(slots=True)
class _Plan:
    """A backtest checked and ready: the model, the versions and the candidates."""

    stored: StoredModel
    from_version: int
    to: int
    train_from: int
    candidates: list[Run]
    points: int


class Backtests:
    """The backtests of one worker: started here, read from Redis."""

    def __init__(
        self,
        store: ModelStore,
        jobs: JobStore,
        settings: Settings,
        limits: Limits,
        starts: Starts,
        state_at: StateAt,
        spawn: Callable[[Awaitable[None]], None],
        stopping: asyncio.Event,
    ) -> None:
        self.store, self.jobs, self.settings, self.limits = store, jobs, settings, limits
        self._starts, self._state_at, self._spawn = starts, state_at, spawn
        self._stopping = stopping  # set when the worker stops: its jobs end at their next step
        self.running = 0

    async def start(
        self,
        name: str,
        learners: list[dict[str, Any]],
        from_version: int | None,
        *,
        points: int = 100,
        wait: float | None = None,
        idem: Idempotency | None = None,
    ) -> dict[str, Any]:
        """Check and start a backtest of model ``name``; the job once done, or as it is
        after ``wait`` seconds (the ``backtest_wait`` setting when None).

        Raises :class:`BadInput` naming the field for a learner or version it cannot
        replay, and :class:`Full` while this worker runs ``backtest_jobs`` already.
        """
        s = self.settings
        if len(learners) > s.backtest_max_learners:
            raise BadInput(
                "learner",
                f"{len(learners)} learners: a backtest takes at most {s.backtest_max_learners} "
                "(backtest_max_learners)",
            )
        specs = len(orjson.dumps(learners))
        if specs > MAX_SPECS:  # the job keeps them twice: as asked, and beside each result
            raise BadInput("learner", f"learner specs of {specs} bytes: at most {MAX_SPECS}")
        job_id = secrets.token_hex(16) if idem is None else _job_id(name, idem.key)
        if idem is not None:  # a retry: the job the first request made
            earlier = await self.jobs.find(job_id, idem.digest)
            if earlier is not None:
                return earlier
        plan = await self._plan(name, learners, from_version, points)
        if self.running >= s.backtest_jobs:
            raise Full(
                "backtest_jobs",
                s.backtest_jobs,
                f"this worker runs {self.running} backtest(s) already (backtest_jobs): "
                "retry when one is done",
            )
        self.running += 1  # taken before the next await: two requests cannot both pass
        try:
            doc, made = await self._created(job_id, name, learners, plan, idem)
        except BaseException:
            self.running -= 1
            raise
        if not made:  # a retry: the job the first request made
            self.running -= 1
            return doc
        finished = asyncio.Event()
        self._spawn(self._run(doc, plan, finished))  # gives the slot back when it ends
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(finished.wait(), s.backtest_wait if wait is None else wait)
        return dict(doc)

    async def _created(
        self,
        job_id: str,
        name: str,
        learners: list[dict[str, Any]],
        plan: _Plan,
        idem: Idempotency | None,
    ) -> tuple[dict[str, Any], bool]:
        """The job stored, and whether this request made it (else: the first one's)."""
        now = _now_ms()
        doc: dict[str, Any] = {
            "id": job_id,
            "kind": "backtest",
            "model": name,
            "incarnation": plan.stored.incarnation,
            "status": "running",
            "created": now,
            "updated": now,
            "seconds": 0.0,
            "progress": {"done": 0, "total": plan.to - plan.train_from},
            "request": {"learners": learners, "from_version": plan.from_version},
            "result": None,
            "error": None,
        }
        earlier = await self.jobs.create(doc, "" if idem is None else idem.digest)
        return (doc, True) if earlier is None else (earlier, False)

    async def read(self, job_id: str) -> dict[str, Any] | None:
        """The job as its worker last wrote it; one still running whose worker has not
        written for :data:`SILENT_MS` is reported failed (its worker stopped)."""
        got = await self.jobs.read(job_id)
        if got is None:
            return None
        doc = got[0]
        if doc["status"] == "running" and _now_ms() - int(doc.get("updated", 0)) > SILENT_MS:
            doc["status"], doc["error"] = "failed", "its worker stopped reporting"
        return doc

    async def latest(self, name: str, incarnation: str) -> dict[str, Any] | None:
        """Model ``name``'s latest backtest, while kept (of this incarnation of it)."""
        job_id = await self.jobs.latest(name)
        doc = None if job_id is None else await self.read(job_id)
        return doc if doc is not None and doc.get("incarnation") == incarnation else None

    # -- planning -------------------------------------------------------------------------

    async def _plan(
        self, name: str, learners: list[dict[str, Any]], from_version: int | None, points: int
    ) -> _Plan:
        stored, starts, _ = await self._starts(name)
        head = stored.version
        if from_version is None:  # the earliest the model can be rebuilt at
            if not starts:
                raise BadInput("from_version", f"model {name!r} cannot be rebuilt at any version")
            from_version = min(st.version for st in starts)
        elif not any(st.version <= from_version <= st.until for st in starts):
            ranges = ", ".join(f"{st.version} to {st.until}" for st in reversed(starts))
            raise BadInput(
                "from_version",
                f"{from_version}: model {name!r} can be rebuilt at {ranges or 'no version'}",
            )
        most = self.settings.backtest_max_trials
        each = 1 + len(learners)
        usable = sorted(
            (s for s in starts if s.version <= from_version and (head - s.version) * each <= most),
            key=lambda s: s.version,
        )
        if not usable or (head - from_version) * each > most:
            raise BadInput(
                "from_version",
                f"replaying the {head - from_version} log entries from {from_version} through "
                f"{each} learners is beyond {most} (backtest_max_trials): start later",
            )
        start = usable[0]
        candidates = await asyncio.to_thread(self._candidates, stored, learners, start)
        return _Plan(stored, from_version, head, start.version, candidates, points)

    def _candidates(
        self, stored: StoredModel, learners: list[dict[str, Any]], start: Start
    ) -> list[Run]:
        """Each candidate, untrained at ``start``, checked against the budgets."""
        own = plan_model(stored.config, self.limits)[1]
        runs = []
        for i, spec in enumerate(learners):
            where = "learner" if len(learners) == 1 else f"learner.{i}"
            config = {**stored.config, "learner": spec}
            space = input_of(start.space)  # not the model's learner nor its challengers
            try:
                form = plan_model(with_space(config, space), self.limits)[1]
                if form != own:
                    raise BadInput(
                        "learner.kind",
                        f"{spec.get('kind')} takes {form}, but this model's log holds {own}",
                    )
                m = LiveModel(
                    stored.name,
                    stored.incarnation,
                    config,
                    version=start.version,
                    space=space,
                    limits=self.limits,
                )
            except BadInput as e:
                rest = e.field.removeprefix("learner")
                raise BadInput(where + rest, e.message) from None
            runs.append(Run(spec, m))
        return runs

    # -- running --------------------------------------------------------------------------

    async def _run(self, doc: dict[str, Any], plan: _Plan, finished: asyncio.Event) -> None:
        began = time.monotonic()
        replay: Replay | None = None
        try:
            name = plan.stored.name
            model = await self._state_at(name, plan.from_version, field="from_version")
            runs = [Run(model.config["learner"], model, served=True), *plan.candidates]
            replay = Replay(runs, plan.from_version, plan.to, plan.points)
            await self._replay(doc, replay, name, plan.train_from, began)
        except asyncio.CancelledError:
            doc["status"], doc["error"] = "failed", STOPPED
            raise
        except (StorageError, LogGap, BadInput) as e:
            doc["status"], doc["error"] = "failed", str(e) or type(e).__name__
        except Exception as e:  # a fault of the service: kept in the job, logged
            log.exception("backtest %s of %s failed", doc["id"], doc["model"])
            doc["status"], doc["error"] = "failed", f"{type(e).__name__}: {e}"
        finally:
            self.running -= 1
            if replay is not None:
                doc["result"] = _result(plan, replay)
                doc["progress"]["done"] = replay.done - plan.train_from
            doc["seconds"] = round(time.monotonic() - began, 3)
            doc["updated"] = _now_ms()
            try:
                async with asyncio.timeout(5):
                    await self.jobs.save(doc)
            except (StorageError, TimeoutError) as e:
                log.warning("backtest %s: its end could not be stored: %s", doc["id"], e)
            finished.set()

    async def _replay(
        self, doc: dict[str, Any], replay: Replay, name: str, train_from: int, began: float
    ) -> None:
        saved = time.monotonic()
        limit = self.settings.backtest_max_seconds
        while True:
            if replay.read < replay.to:
                entries = await self.store.read_log_fields(name, replay.read, CHUNK, upto=replay.to)
                if not entries:
                    raise LogGap(f"model {name!r}: its log after {replay.read} is gone")
                try:
                    replay.take(entries, replies=True)
                except CorruptData as e:  # a newer snapshot trimmed the log meanwhile
                    raise LogGap(f"model {name!r}: {e}: its log moved on meanwhile") from None
            final = replay.read >= replay.to
            while (reset := await asyncio.to_thread(replay.advance, final)) is not None:
                replay.reset(reset, await self._rebuilt(name, reset))
            if final:
                doc["status"] = "done"
                return
            if self._stopping.is_set():
                doc["status"], doc["error"] = "failed", STOPPED
                return
            if await self.jobs.stopping(doc["id"]):  # a request to stop is taken at once
                doc["status"], doc["error"] = "cancelled", "cancelled on request"
                return
            now = time.monotonic()
            if now - began > limit:
                doc["status"] = "failed"
                doc["error"] = f"stopped after {limit:g} s (backtest_max_seconds)"
                return
            if now - saved >= SAVE_EVERY:
                saved = now
                doc["progress"]["done"] = replay.done - train_from
                doc["seconds"] = round(now - began, 3)
                doc["updated"] = _now_ms()
                if await self.jobs.save(doc):
                    doc["status"], doc["error"] = "cancelled", "cancelled on request"
                    return

    async def _rebuilt(self, name: str, version: int) -> LiveModel | None:
        """The model rebuilt just after the reset at ``version``; None when it cannot be."""
        try:
            return await self._state_at(name, version)
        except (BadInput, Conflict, LogGap):
            return None


def _result(plan: _Plan, replay: Replay) -> dict[str, Any]:
    model, *candidates = replay.runs
    return {
        "from_version": plan.from_version,
        "to_version": plan.to,
        "trained_from": plan.train_from,
        "resets": replay.resets,
        "model": model.result(),
        "candidates": [r.result() for r in candidates],
    }


def _job_id(name: str, key: str) -> str:
    """The job of a backtest asked for with an Idempotency-Key: its retries find it."""
    return hashlib.blake2b(f"{name}\0{key}".encode(), digest_size=16).hexdigest()


def _now_ms() -> int:
    return int(time.time() * 1000)
