"""The service: models, predictions and labels, over storage and the learners.

It knows Redis only through :mod:`storage` and HTTP not at all. Every trial is one script
call (one round trip) that appends it to the model's log atomically; the worker then
replays the log up to and including that trial, which gives the answer
(:mod:`app.replicas`).

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

import itertools
import secrets
import time
from collections.abc import Awaitable, Sequence
from typing import Any

import numpy as np
import orjson

from app.errors import BadInput, TrialConflict, TrialExpired, TrialNotFound
from app.live import Applied, InvalidConfig, LiveModel, build_model
from app.replicas import LIMIT, TRIAL_LIMIT, Replicas
from models.base import UnknownLabel
from models.instance import Attributes, Experts
from models.state import InvalidState
from storage.codec import encode_instance
from storage.errors import Conflict, CorruptData, ModelNotFound
from storage.repository import LogGap, Statistics, StoredModel, Sync

__all__ = ["ModelService"]


class ModelService(Replicas):
    """All models of one key prefix, as this worker process serves them."""

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
        s = await self.store.read_statistics(name, int(time.time() * 1000))
        if s.model.folded < s.model.version or s.summary_version < s.model.version:
            self._refresh_soon(name)  # e.g. the worker that appended them died
        return s

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

    # -- trials -----------------------------------------------------------------------

    _trial_ids = itertools.count()
    _trial_prefix = secrets.token_hex(8)

    def _new_trial_id(self) -> str:
        """A trial id no other process makes: a random prefix per process and a count."""
        return f"{self._trial_prefix}{next(self._trial_ids):x}"

    def _instances(
        self, m: LiveModel, payloads: Sequence[Any]
    ) -> list[Attributes | Experts | BadInput]:
        """Each payload's instance, or a 422 naming ``instance``."""
        return [
            BadInput("instance", str(x)) if isinstance(x, Exception) else x
            for x in m.encode_each(payloads)
        ]

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
        instances = self._instances(m, [payload for payload, _ in items])
        for i, ((_, trial_id), x) in enumerate(zip(items, instances, strict=True)):
            if isinstance(x, BadInput):
                out.append(x)
                continue
            out.append({})
            xs.append((i, x, trial_id or self._new_trial_id()))
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
                    limit=TRIAL_LIMIT,
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
                limit=TRIAL_LIMIT,
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
                out[i] = {"trial_id": t, **self._judged(m, r.predicted, y, updated)}
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
            u = await self.store.read_outcome(m.name, trial_id)
            if u not in (0, 1):
                raise CorruptData(f"trial {trial_id!r}: outcome of log entry {seq} is lost")
            return u == 1
        return got.updated

    def _judged(self, m: LiveModel, p: int, y: int, updated: bool) -> dict[str, Any]:
        return {
            "predicted": m.labels[p],
            "label": m.labels[y],
            "mistake": p != y,
            "updated": updated,
        }

    async def learn(
        self, name: str, items: Sequence[tuple[Any, Any]]
    ) -> list[dict[str, Any] | Exception]:
        """Trials whose labels are known: appended in order and learned from."""
        m0 = await self.live(name)
        out: list[dict[str, Any] | Exception] = []
        todo: list[tuple[int, Attributes | Experts, int]] = []
        instances = self._instances(m0, [payload for payload, _ in items])
        for i, ((_, label), x) in enumerate(zip(items, instances, strict=True)):
            try:
                if isinstance(x, BadInput):
                    raise x
                todo.append((i, x, self._class(m0, label, "label")))
                out.append({})
            except BadInput as e:
                out.append(e)
        if not todo:
            return out
        encoded = [(encode_instance(x), y) for _, x, y in todo]

        def call(m: LiveModel) -> Awaitable[tuple[Sync, int]]:
            if m.incarnation != m0.incarnation:  # re-created meanwhile: another config
                raise ModelNotFound(name)
            return self.store.learn(
                name,
                m.incarnation,
                m.version,
                fold=m.fold_payload(),
                limit=TRIAL_LIMIT,
                items=encoded,
            )

        m, (sync, first) = await self._script(name, call)
        m = await self._catch_up(m, sync, own=(first, [(x, y) for _, x, y in todo]))
        self._snapshot_due(m, first, first + len(todo) - 1)
        for seq, (i, _, y) in enumerate(todo, start=first):
            got: Applied | None = m.recent.get(seq)
            if got is None:
                out[i] = CorruptData(f"log entry {seq} was not replayed")
                continue
            out[i] = self._judged(m, got.predicted, y, got.updated)
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
