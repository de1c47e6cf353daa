"""Trials: predict now, label later (exactly once), or learn with a known label.

Semantics a client relies on:

* A prediction is made by the hypothesis at the model's current log version (a
  prediction raced by another worker's label is made again), and is kept until the
  model's label deadline.
* A label is applied exactly once: the same label again returns the first answer and
  changes nothing; a different one is a conflict. Its ``mistake`` is judged against the
  prediction that was served; the update goes to the hypothesis current when the label
  is applied, which may have learned from other trials since.
* ``learn`` is a trial whose label is known: judged and applied at its place in the log;
  with an idempotency key it is appended at most once.

Everything sent with a trial (class indices, encoded instances) is derived from the
incarnation of the model the script then checks: when the model was deleted and created
again meanwhile, the call is encoded again from the new one, never sent stale.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from app.core.errors import BadInput, TrialConflict, TrialExpired, TrialNotFound
from app.service.fanout import Fanout
from app.service.gather import Gathers
from app.service.live_model import Applied, LiveModel
from app.service.replicas import TRIAL_LIMIT, Replicas
from models.core.instance import Attributes, Experts
from models.core.learner import UnknownLabel
from models.explain import NotExplainable, describe, explain, explainable
from storage.codec import encode_instance, encode_instances
from storage.errors import Conflict, CorruptData, Full, ModelNotFound, Unavailable
from storage.repository import Idempotency, LearnGroup, LearnResult, LogGap

__all__ = ["NOT_ASKED", "InputsItem", "Judgement", "LearnRequest", "TrialCalls"]

Result = dict[str, Any] | Exception
LearnRequest = tuple[Idempotency | None, Sequence[tuple[Any, Any]]]
PredictItem = tuple[Any, str | None]  # (instance payload, trial id or None)
# an item of a predict with inputs: no inputs to send, the experts with endpoints not asked
NOT_ASKED: Any = object()
InputsItem = tuple[dict[str, Any], str | None, Any]  # (instance, trial id, inputs or NOT_ASKED)
Todo = list[tuple[int, Attributes | Experts, int]]  # (item, instance, class) to append
_EARLIER = "Idempotency-Key was used with a model of this name that has been deleted since"


# single-trial calls of one model sent together at most. Sixteen already share a script
# call's fixed cost; a larger group would take in every caller of a busy model, leaving
# the worker idle while Redis runs it, where two smaller groups take turns: one at Redis
# while the worker answers the other's callers and reads their next calls.
GATHER_MOST = 16
# judgements a model keeps for reuse at most (k x k x 2 there are)
JUDGEMENTS_MOST = 4096
# script calls of one label or learn call at most: a worker's copy of a deleted
# incarnation, or one too far behind the log, is reloaded and the call sent again (the
# script writes nothing then)
ATTEMPTS = 3


class Judgement(dict[str, Any]):
    """A learned trial's answer (``predicted``, ``label``, ``mistake``, ``updated``),
    one object shared by every trial of a model judged alike: never changed, so that a
    batch's answer writes each one once."""

    __slots__ = ()


def _abstained(names: Sequence[str], retired: frozenset[str], votes: dict[str, Any]) -> list[str]:
    """The experts among ``names`` (retired ones aside) that have no vote in ``votes``."""
    return [e for e in names if e not in retired and votes.get(e) in (None, {})]


def _updated_here(m: LiveModel, seq: int, stored: int) -> bool | None:
    """Whether applying log entry ``seq`` updated the learner, as its stored outcome
    (``stored``, -1 for none yet) or ``m`` says; None when neither does."""
    if stored >= 0:
        return stored == 1
    got = m.recent.get(seq)
    return None if got is None else got.updated


class TrialCalls:
    """Predict, label and learn on the models ``replicas`` holds."""

    def __init__(self, replicas: Replicas) -> None:
        self.replicas = replicas
        self.store = replicas.store
        self.settings = replicas.settings
        # single-trial calls of a model gathered into batch calls (app.service.gather);
        # a gathered predict answers items x labels scores: within max_answer_scores
        predict_most = min(GATHER_MOST, self.settings.max_answer_scores // self.settings.max_labels)
        self._predicts: Gathers[str, PredictItem, Result] = Gathers(
            self._predict_tracked, predict_most
        )
        # an untracked prediction waits on nothing: gathered by turns of the event loop
        self._untracked: Gathers[str, PredictItem, Result] = Gathers(
            self._predict_untracked, predict_most, by_turn=True
        )
        self._labels: Gathers[str, tuple[str, Any], Result] = Gathers(self.label, GATHER_MOST)
        self._learns: Gathers[str, LearnRequest, Result] = Gathers(self._learn_each, GATHER_MOST)
        # the experts' endpoints, asked by a predict with inputs (app.service.fanout)
        self.fanout = Fanout(self.settings)

    # -- single trials, gathered ------------------------------------------------------

    async def predict_one(
        self,
        name: str,
        payload: Any,
        trial_id: str | None,
        *,
        track: bool = True,
        explain: int = 0,
    ) -> Result:
        """:meth:`predict` of one item, gathered with others of the model; one to explain
        (``explain`` inputs per label) is predicted on its own."""
        if explain:
            items = [(payload, trial_id)]
            return (await self.predict(name, items, track=track, explain=[explain]))[0]
        gathered = self._predicts if track else self._untracked
        return await gathered(name, (payload, trial_id))

    async def predict_inputs(
        self,
        name: str,
        inputs: Any,
        instance: dict[str, Any],
        trial_id: str | None,
        *,
        track: bool = True,
        explain: int = 0,
    ) -> Result:
        """:meth:`predict_one` of ``instance`` with the votes of the experts that have an
        endpoint and no vote in it, asked with ``inputs`` (:mod:`app.service.fanout`):
        kept in the trial as posted votes are. The answer names the experts that
        abstained (``abstained``)."""
        m = await self.replicas.live(name)
        posted = instance.get("experts") or {}
        experts = {**await self.fanout.votes(name, m.space, inputs, posted), **posted}
        payload = {**instance, "experts": experts}
        got = await self.predict_one(name, payload, trial_id, track=track, explain=explain)
        if isinstance(got, dict):
            got = {**got, "abstained": _abstained(m.space.expert_names, m.space.retired, experts)}
        return got

    async def predict_inputs_many(
        self,
        name: str,
        items: Sequence[InputsItem],
        *,
        track: bool = True,
        explain: Sequence[int] | None = None,
    ) -> list[Result]:
        """:meth:`predict` of several items by one hypothesis, each (instance, trial id
        or None, inputs or :data:`NOT_ASKED`) whose ``inputs`` the experts with an
        endpoint are asked, as :meth:`predict_inputs` asks them: the items' calls go at
        once (those to one v2 endpoint gathered as rows of one request), each waiting at
        most the deadline. An item's ``inputs`` that cannot be sent is its error
        (``inputs``); an item without any is predicted with the votes it posts."""
        m = await self.replicas.live(name)
        asking = [
            (i, instance.get("experts") or {}, inputs)
            for i, (instance, _, inputs) in enumerate(items)
            if inputs is not NOT_ASKED
        ]
        fetched = await asyncio.gather(
            *(self.fanout.votes(name, m.space, inputs, votes) for _, votes, inputs in asking),
            return_exceptions=True,
        )
        experts: dict[int, dict[str, Any] | BaseException] = {
            i: got if isinstance(got, BaseException) else {**got, **votes}
            for (i, votes, _), got in zip(asking, fetched, strict=True)
        }
        out: list[Result] = []
        todo: list[tuple[int, PredictItem, dict[str, Any] | None]] = []
        for i, (instance, trial_id, _) in enumerate(items):
            got = experts.get(i)
            if isinstance(got, BadInput):
                out.append(got)
                continue
            if isinstance(got, BaseException):
                raise got
            payload = instance if got is None else {**instance, "experts": got}
            todo.append((i, (payload, trial_id), got))
            out.append({})
        if not todo:
            return out
        space = m.space
        tops = None if explain is None else [explain[i] for i, _, _ in todo]
        results = await self.predict(name, [item for _, item, _ in todo], track=track, explain=tops)
        for (i, _, votes), got in zip(todo, results, strict=True):
            if isinstance(got, dict) and votes is not None:
                got = {**got, "abstained": _abstained(space.expert_names, space.retired, votes)}
            out[i] = got
        return out

    async def label_one(self, name: str, trial_id: str, label: Any) -> Result:
        """:meth:`label` of one trial, gathered with others of the model."""
        return await self._labels(name, (trial_id, label))

    async def learn_one(
        self, name: str, payload: Any, label: Any, idem: Idempotency | None = None
    ) -> Result:
        """:meth:`learn` of one trial, gathered with others of the model (each keeps its
        own idempotency key)."""
        return await self._learns(name, (idem, [(payload, label)]))

    async def _predict_tracked(self, name: str, items: list[PredictItem]) -> list[Result]:
        return await self.predict(name, items)

    async def _predict_untracked(self, name: str, items: list[PredictItem]) -> list[Result]:
        return await self.predict(name, items, track=False)

    async def _learn_each(self, name: str, requests: list[LearnRequest]) -> list[Result]:
        return [out[0] for out in await self.learn_groups(name, requests)]

    def _new_trial_id(self) -> str:
        """A trial id nobody can guess: 128 random bits."""
        return secrets.token_urlsafe(16)

    def _instances(
        self, m: LiveModel, payloads: Sequence[Any]
    ) -> list[Attributes | Experts | BadInput]:
        """Each payload's instance, or a 422 naming ``instance``."""
        return [
            BadInput("instance", str(x)) if isinstance(x, Exception) else x
            for x in m.encode_each(payloads)
        ]

    async def _changed(self, m: LiveModel, out: Sequence[Any]) -> bool:
        """Whether, after part of a request was refused (``out`` holds a BadInput), a sync
        finds that the model's input changed since this worker's copy last read its log:
        an expert, a feature or a label another worker added a moment ago. Then the
        request is read again, against the input as it is now."""
        if not any(isinstance(o, BadInput) for o in out):
            return False
        space = m.space
        try:
            return await self.replicas.sync(m) is m and m.space is not space
        except (ModelNotFound, LogGap):
            return False

    def _class(self, m: LiveModel, label: Any, field: str) -> int:
        most = self.settings.max_label_length
        if isinstance(label, str) and len(label) > most:
            raise BadInput(field, f"{len(label)} characters: expected at most {most}")
        try:
            return m.space.class_of(label)
        except UnknownLabel as e:
            raise BadInput(field, str(e)) from None

    def _classes(self, m: LiveModel, labels: Sequence[Any]) -> list[int | None]:
        """The class of each of ``labels`` that :meth:`_class` takes as it is, None for
        the others (ask it, which says why)."""
        most = self.settings.max_label_length
        got = m.space.classes_of(labels)
        return [
            None if type(y) is str and len(y) > most else c
            for y, c in zip(labels, got, strict=True)
        ]

    def _scores(self, m: LiveModel, s: np.ndarray) -> dict[str, float]:
        return dict(zip(m.label_keys, s.tolist(), strict=True))

    # -- predict ----------------------------------------------------------------------

    async def predict(
        self,
        name: str,
        items: Sequence[PredictItem],
        *,
        track: bool = True,
        explain: Sequence[int] | None = None,
    ) -> list[Result]:
        """Predict each (instance payload, trial id or None); keep tracked ones pending.

        ``explain``: for each item, how many inputs per label its answer's ``explanation``
        lists (0: none; see :mod:`models.explain`), worked out by the hypothesis that
        predicted; it changes nothing else of the call."""
        m = await self.replicas.live(name)
        most = self.settings.max_answer_scores
        if len(items) * m.k > most:
            raise BadInput(
                "items",
                f"{len(items)} items x {m.k} labels = {len(items) * m.k} scores: expected "
                f"at most {most} (max_answer_scores)",
            )
        if explain is not None:
            self._explainable(m, explain)
        if not track:
            if self.replicas.stale(m):
                m = await self.replicas.fresh(name)
            instances = self._instances(m, [payload for payload, _ in items])
            if await self._changed(m, instances):
                instances = self._instances(m, [payload for payload, _ in items])
            each = iter(m.predict_many([x for x in instances if not isinstance(x, BadInput)]))
            answers: list[Result] = [
                x if isinstance(x, BadInput) else self._predicted(m, None, *next(each), m.version)
                for x in instances
            ]
            if explain is not None:
                todo = [(i, x) for i, x in enumerate(instances) if not isinstance(x, BadInput)]
                self._explained(answers, todo, self._explanations(m, todo, explain), m.version)
            return answers
        ids = [trial_id or self._new_trial_id() for _, trial_id in items]
        encoded_for = ""
        rows = self.settings.compact_votes
        for attempt in range(4):
            m = await self.replicas.live(name)
            if m.incarnation != encoded_for:  # (again) for this incarnation
                encoded_for = m.incarnation
                instances = self._instances(m, [payload for payload, _ in items])
                if await self._changed(m, instances):
                    instances = self._instances(m, [payload for payload, _ in items])
                todo = [(i, x) for i, x in enumerate(instances) if not isinstance(x, BadInput)]
                encoded = encode_instances([x for _, x in todo], rows)
                other_form: set[int] = set()  # the items sent in the form rows does not pick
            out: list[Result] = [x if isinstance(x, BadInput) else {} for x in instances]
            if not todo:
                return out
            known, seen = m.version, m.stamp
            made = m.predict_many([x for _, x in todo])
            # by the hypothesis that made them, before another trial can move it
            notes = None if explain is None else self._explanations(m, todo, explain)
            sent = [
                (ids[i], enc, c, s.astype("<f8").tobytes())
                for (i, _), enc, (c, s) in zip(todo, encoded, made, strict=True)
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
                    most_pending=self.settings.max_pending,
                    items=sent,
                    seen=seen,
                )
            except (ModelNotFound, LogGap):
                self.replicas.drop(m)
                if attempt == 3:
                    raise
                continue
            m = await self.replicas.catch_up(m, sync)
            if results is None:  # another worker applied a trial meanwhile: predict again
                continue
            if attempt < 3 and self._in_other_form(todo, results, encoded, other_form, rows):
                continue  # a retry, pending as another worker kept it: ask again
            stored = []
            for (i, x), (c, s), r, data in zip(todo, made, results, encoded, strict=True):
                out[i] = self._stored(m, ids[i], c, s, known, r.status, r)
                if r.status == "ok":  # stored as ``data``: its label takes it from memory
                    stored.append((data, x))
            self.replicas.kept.put_many(stored)
            if notes is not None:
                self._explained(out, todo, notes, known)
            return out
        raise AssertionError("unreachable")

    def _explainable(self, m: LiveModel, tops: Sequence[int]) -> None:
        """Refuse an explained predict that the learner cannot explain, or whose parts
        would pass ``max_answer_scores``, before anything is kept."""
        most = self.settings.max_answer_scores
        parts = m.k * sum(tops)
        if parts > most:
            raise BadInput(
                "explain_top",
                f"{m.k} labels x {sum(tops)} inputs explained in all = {parts} parts: "
                f"expected at most {most} (max_answer_scores)",
            )
        try:
            explainable(m.learner)
        except NotExplainable as e:
            raise BadInput("explain", str(e)) from None

    @staticmethod
    def _explanations(
        m: LiveModel, todo: Sequence[tuple[int, Attributes | Experts]], tops: Sequence[int]
    ) -> list[dict[str, Any] | None]:
        """The explanation of each of ``todo`` (item, instance) whose item asks for one
        (``tops[item]`` inputs per label), by ``m``'s hypothesis as it is now."""
        try:
            return [
                describe(explain(m.learner, x), m.space, m.form, tops[i]) if tops[i] else None
                for i, x in todo
            ]
        except NotExplainable as e:  # the model's learner changed since it was checked
            raise BadInput("explain", str(e)) from None

    @staticmethod
    def _explained(
        out: list[Result],
        todo: Sequence[tuple[int, Attributes | Experts]],
        notes: Sequence[dict[str, Any] | None],
        version: int,
    ) -> None:
        """Add its explanation to each answer of ``todo`` that asked for one; null for an
        answer predicted at another version than ``version`` (a retried trial's, kept as
        first served), whose hypothesis is no longer at hand."""
        for (i, _), note in zip(todo, notes, strict=True):
            r = out[i]
            if note is not None and isinstance(r, dict):
                r["explanation"] = note if r["model_version"] == version else None

    @staticmethod
    def _in_other_form(
        todo: Sequence[tuple[int, Attributes | Experts]],
        results: Sequence[Any],
        encoded: list[bytes],
        other_form: set[int],
        rows: bool,
    ) -> bool:
        """Whether some item was refused as taken, and its instance has a second stored
        form (full rows of scores, kept compactly or not: ``compact_votes``) it was not
        yet sent in; ``encoded`` then holds that form for it. A retry of a prediction
        that a worker with the other setting stored is so answered as that worker would
        have, not as a conflict: the trial's pending instance is compared byte for byte."""
        again = False
        for j, ((_, x), r) in enumerate(zip(todo, results, strict=True)):
            if r.status != "conflict" or j in other_form:
                continue
            other = encode_instance(x, not rows)
            if other != encoded[j]:
                encoded[j] = other
                other_form.add(j)
                again = True
        return again

    def _stored(
        self, m: LiveModel, t: str, c: int, s: np.ndarray, known: int, status: str, r: Any
    ) -> Result:
        if status == "ok":
            return self._predicted(m, t, c, s, known)
        if status == "existing":
            stored = np.frombuffer(r.scores, "<f8")
            if stored.size != m.k or not 0 <= r.predicted < m.k:
                return CorruptData(f"trial {t!r}: stored prediction is malformed")
            return self._predicted(m, t, r.predicted, stored, r.version)
        if status == "full":
            most = self.settings.max_pending
            return Full("max_pending", most, f"{most} predictions wait for labels: label some")
        if status == "invalid":
            return CorruptData(f"trial {t!r}: refused by the log's check")
        return TrialConflict(f"trial_id {t!r} is taken by another instance or already labelled")

    def _predicted(
        self, m: LiveModel, trial_id: str | None, c: int, s: np.ndarray, version: int
    ) -> dict[str, Any]:
        return {
            "trial_id": trial_id,
            "label": m.labels[c],
            "scores": self._scores(m, s),
            "model_version": version,
        }

    # -- label ------------------------------------------------------------------------

    async def label(self, name: str, items: Sequence[tuple[str, Any]]) -> list[Result]:
        """Label pending trials, in order; each is applied at most once."""
        for attempt in range(ATTEMPTS):
            m = await self.replicas.live(name)
            out, todo = await self._label_items(m, items)
            if not todo:
                return out
            try:
                sync, results = await self.store.label(
                    name,
                    m.incarnation,
                    m.version,
                    fold=m.fold_payload(),
                    limit=TRIAL_LIMIT,
                    items=[(t, y) for _, t, y in todo],
                    seen=m.stamp,
                )
                break
            except (ModelNotFound, LogGap):  # a deleted incarnation, or too far behind
                self.replicas.drop(m)
                if attempt == ATTEMPTS - 1:
                    raise
        # the labels applied, the log's last entries in order (the store checks)
        applied = [r.seq for r in results if r.status == "ok"]
        own = [
            (r.instance, y, r.predicted, t)
            for (_, t, y), r in zip(todo, results, strict=True)
            if r.status == "ok"
        ]
        m = await self.replicas.catch_up(m, sync, labels=(applied[0], own) if own else None)
        if applied:
            self.replicas.snapshot_due(m, applied[0], applied[-1])
        for (i, t, y), r in zip(todo, results, strict=True):
            if r.status in ("ok", "repeat"):
                updated = _updated_here(m, r.seq, r.updated)
                if updated is None:
                    updated = await self._updated(m, t, r.seq)
                out[i] = {"trial_id": t, **self._judged(m, r.predicted, y, updated)}
            elif r.status == "conflict":
                out[i] = TrialConflict(
                    f"trial {t!r} is already labelled {m.labels[r.label]!r}"
                    if 0 <= r.label < m.k
                    else f"trial {t!r} is already labelled otherwise"
                )
            elif r.status == "expired":
                out[i] = TrialExpired(f"trial {t!r} passed its label deadline")
            elif r.status == "invalid":
                out[i] = CorruptData(f"trial {t!r}: the label was refused by the log's check")
            else:
                out[i] = TrialNotFound(f"no pending trial {t!r} (unknown or long expired)")
        return out

    async def _label_items(
        self, m: LiveModel, items: Sequence[tuple[str, Any]]
    ) -> tuple[list[Result], list[tuple[int, str, int]]]:
        """Each item's answer so far (an error, or {} for a label to apply) and the labels
        to apply, (position, trial id, class): class indices of ``m``'s incarnation, which
        the script then checks."""
        out: list[Result] = []
        todo: list[tuple[int, str, int]] = []
        for again in (False, True):
            out, todo = [], []
            for i, (trial_id, label) in enumerate(items):
                try:
                    todo.append((i, trial_id, self._class(m, label, "label")))
                    out.append({})
                except BadInput as e:
                    out.append(e)
            if again or not await self._changed(m, out):
                break
        return out, todo

    async def _updated(self, m: LiveModel, trial_id: str, seq: int) -> bool:
        """Whether applying log entry ``seq`` updated the learner, when neither its stored
        outcome nor ``m`` says (:func:`_updated_here`): replayed elsewhere and folded
        meanwhile, it is read back."""
        m = await self.replicas.sync(m)
        got = m.recent.get(seq)
        if got is None:
            u = await self.store.read_outcome(m.name, m.incarnation, trial_id)
            if u is None:
                raise CorruptData(f"trial {trial_id!r}: outcome of log entry {seq} is lost")
            return u == 1
        return got.updated

    def _judged(self, m: LiveModel, p: int, y: int, updated: bool) -> Judgement:
        key = (p, y, bool(updated))
        got = m.judgements.get(key)
        if got is None:
            if len(m.judgements) >= JUDGEMENTS_MOST:
                m.judgements.clear()
            got = m.judgements[key] = Judgement(
                predicted=m.labels[p], label=m.labels[y], mistake=p != y, updated=bool(updated)
            )
        return got

    # -- learn ------------------------------------------------------------------------

    async def learn(
        self, name: str, items: Sequence[tuple[Any, Any]], idem: Idempotency | None = None
    ) -> list[Result]:
        """Trials whose labels are known: appended in order and learned from."""
        return (await self.learn_groups(name, [(idem, items)]))[0]

    async def learn_groups(
        self, name: str, requests: Sequence[LearnRequest], keep: bool = True
    ) -> list[list[Result]]:
        """Several learn requests in one script call, in order; a request with an
        idempotency key is appended at most once (its retries get the first answer,
        the answers of all the requests appended now being kept in one more call; with
        ``keep`` False they are not, and a retry reads its answer from the outcomes
        folded into its record, as when keeping failed)."""

        for attempt in range(ATTEMPTS):
            m = await self.replicas.live(name)
            # instances and class indices of the incarnation the script then checks
            outs: list[list[Result]] = []
            todos: list[Todo] = []
            for again in (False, True):
                outs, todos = self._learn_items(m, [items for _, items in requests])
                if again or not await self._changed(m, [o for out in outs for o in out]):
                    break
            if not any(todos) and all(idem is None for idem, _ in requests):
                return outs
            # the instances of all the requests encoded together, then cut apart
            encoded = iter(
                encode_instances(
                    [x for todo in todos for _, x, _ in todo], self.settings.compact_votes
                )
            )
            groups = [
                LearnGroup([(next(encoded), y) for _, _, y in todo], idem)
                for (idem, _), todo in zip(requests, todos, strict=True)
            ]
            try:
                sync, results = await self.store.learn(
                    name,
                    m.incarnation,
                    m.version,
                    fold=m.fold_payload(),
                    limit=TRIAL_LIMIT,
                    keep_ms=m.ttl_ms,
                    groups=groups,
                    seen=m.stamp,
                )
                break
            except (ModelNotFound, LogGap):  # a deleted incarnation, or too far behind
                self.replicas.drop(m)
                if attempt == ATTEMPTS - 1:
                    raise
        own = [
            (r.first, [(x, y) for _, x, y in todo], idem.key if idem else "")
            for (idem, _), todo, r in zip(requests, todos, results, strict=True)
            if r.status == "ok" and todo
        ]
        m = await self.replicas.catch_up(m, sync, own=own)
        if own:
            self.replicas.snapshot_due(m, own[0][0], own[-1][0] + len(own[-1][1]) - 1)
        kept: list[tuple[Idempotency, bytes]] = []
        for (idem, _), out, todo, r in zip(requests, outs, todos, results, strict=True):
            answer = await self._learned(m, idem, out, todo, r)
            if keep and idem is not None and answer is not None:
                kept.append((idem, answer))
        if kept:  # for the requests' retries, all in one script call
            await self.store.trials.keep_answers(name, kept)
        return outs

    def _learn_items(
        self, m: LiveModel, requests: Sequence[Sequence[tuple[Any, Any]]]
    ) -> tuple[list[list[Result]], list[Todo]]:
        """Each request's answers so far (an error, or {} for an item to learn) and its
        items to learn, (position, instance, class); the instances of all the requests
        are encoded together."""
        instances = iter(self._instances(m, [p for items in requests for p, _ in items]))
        classes = iter(self._classes(m, [y for items in requests for _, y in items]))
        outs: list[list[Result]] = []
        todos: list[Todo] = []
        for items in requests:
            out: list[Result] = []
            todo: Todo = []
            for i, ((_, label), x, c) in enumerate(zip(items, instances, classes, strict=False)):
                try:
                    if isinstance(x, BadInput):
                        raise x
                    todo.append((i, x, self._class(m, label, "label") if c is None else c))
                    out.append({})
                except BadInput as e:
                    out.append(e)
            outs.append(out)
            todos.append(todo)
        return outs, todos

    async def _learned(
        self,
        m: LiveModel,
        idem: Idempotency | None,
        out: list[Result],
        todo: list[tuple[int, Attributes | Experts, int]],
        r: LearnResult,
    ) -> bytes | None:
        """Fill ``out`` with the answers to one learn request; the answer to keep for its
        retries when it was appended now (None otherwise)."""
        if r.status == "mismatch":
            for i, _, _ in todo:
                out[i] = Conflict("Idempotency-Key was used before with another request")
            return None
        kept: list[Any] | None = None
        if r.status == "repeat":
            if r.incarnation != m.incarnation:
                for i, _, _ in todo:
                    out[i] = Conflict(_EARLIER)
                return None
            if r.answer:
                kept = orjson.loads(r.answer)
            else:  # the first request's worker has not kept its answer (yet)
                m = await self.replicas.sync(m)
        folded: dict[int, tuple[int, bool]] = {}
        if r.status == "repeat" and kept is None and idem is not None:
            missing = [r.first + j for j in range(len(todo)) if r.first + j not in m.recent]
            if missing:  # replayed before this worker loaded the model: folded into the record
                folded = await self.store.learn_outcomes(m.name, idem, missing)
        outcomes: list[tuple[int, bool]] = []
        for j, (i, _, y) in enumerate(todo):
            seq = r.first + j
            got: Applied | None = m.recent.get(seq)
            if kept is not None and j < len(kept):
                p, u = kept[j]
            elif got is not None and got.predicted >= 0:
                p, u = got.predicted, got.updated
            elif seq in folded:
                p, u = folded[seq]
            elif (mine := m.unfolded.get(seq)) is not None and mine[1] >= 0:
                p, u = mine[1], mine[2] == 1  # replayed here, not yet folded
            else:  # folded soon by whichever worker replayed it: a retry finds it
                self.replicas.refresh_soon(m.name)
                out[i] = Unavailable(
                    f"log entry {seq}: the outcome of the request first sent with this "
                    "Idempotency-Key is not known here yet: send it again"
                )
                continue
            outcomes.append((p, u))
            out[i] = self._judged(m, p, y, u)
        return orjson.dumps(outcomes) if idem is not None and r.status == "ok" else None
