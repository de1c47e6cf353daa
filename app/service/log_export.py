"""A model's log as plain documents, a page at a time: for notebooks, audits and imports.

Each entry becomes one document, in log order, keyed by its place (``seq``, the model's
version once it is applied):

* ``{"seq", "kind": "learn", "instance", "label"}``: a trial learned with its label;
* ``{"seq", "kind": "label", "trial_id", "instance", "label", "predicted", "served_at"}``:
  a prediction served at version ``served_at`` (absent when the entry does not say) as
  ``predicted``, then labelled;
* ``{"seq", "kind": "change", "change"}``: a change of the model's input, as it was sent
  (``POST .../experts``, ``.../features``, ``.../labels``);
* ``{"seq", "kind": "challenger", "challenger"}``: a shadow challenger attached, promoted
  or retired (``{"op", "name", "learner"}``);
* ``{"seq", "kind": "reset"}``: the learner's state was replaced (a state import or a
  rollback); the state itself is not in the log;
* ``{"seq", "kind": "unreadable", "error"}``: an entry no worker could read (skipped by
  the model too).

An instance is given back as the payload a learn takes (``{"features": ..., "experts":
...}``): features by index or by name, and votes where the experts' scores enter as they
come (``normalize`` "raw", or "raw" among several). Each payload is checked, entry by
entry: encoded again by the model's input as it was at the entry's place (its input as
made and the changes before the entry), it gives exactly the instance the log holds, so
that an import, which replays it there, learns the same. Otherwise the instance is given
as the coordinates the learner reads, ``"x": {"indices", "values"}`` (attributes) or
``"x": {"experts", "classes", "values"}`` (sub-experts), which an import cannot take: an
input that does not keep its payloads (hashed features, normalised votes), a prediction
served before a change of the input and labelled after it (encoded by the input before),
or a place whose input is not known (more than 64 changes, the earlier ones trimmed).

A page holds the entries after version ``after``, at most ``limit``, up to the version the
model had when the page was read; entries are decoded against the model's input then,
which reads every earlier entry alike (an input only grows: no coordinate is renumbered).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from app.core.errors import BadInput
from app.service.live_model import plan_model
from app.service.model_service import ModelService
from models.core.instance import Attributes, Experts, InvalidInstance
from models.core.params import InvalidParameter
from models.inputs.space import InputSpace
from storage.codec import LogEntry, decode_entries, entry_kind, parse_int
from storage.errors import Conflict, CorruptData
from storage.repository import RawEntry, StoredModel, with_space
from storage.scripts import MARKS

__all__ = ["LogPage", "Payloads", "read_page"]

_VOTE, _FEATURE = 1, 2  # the roles of a coordinate that a payload gives back
_KEPT = 64  # the inverse tables and timelines of inputs kept (a model's, mostly)
_UNKNOWN = 2**63  # the version from which on no input is known: none


@dataclass(frozen=True, slots=True)
class LogPage:
    """Entries of a model's log as NDJSON lines (each ending with a newline): those after
    the version asked for, up to ``next_from``; ``version`` is the model's version when
    they were read (more may follow while ``next_from < version``)."""

    lines: list[bytes]
    next_from: int
    version: int


class Payloads:
    """How an instance of ``space`` in learner form ``form`` is given back as the payload
    that encodes to it: each coordinate a named expert's vote for a class, a feature's
    value (its crossing with the first label, in form "experts": the others repeat it),
    or derived from those (a subset's average, a split piece, the constant, a threshold)
    and so left out. ``exact`` is False when the input cannot give its payloads back
    (hashed features, votes without their raw scores). The coordinates of an earlier
    input are this one's too (an input only grows)."""

    def __init__(self, space: InputSpace, form: str) -> None:
        self.space, self.form = space, form
        self.keys = [str(v) if isinstance(v, int) else v for v in space.labels]
        names = space.describe_experts(form)
        wanted = self._wanted(form)
        self.exact = wanted is not None
        self.role = np.zeros(len(names), dtype=np.int8)
        self.slot = np.zeros(len(names), dtype=np.int64)
        self.names: list[Any] = []
        if wanted is None:
            return
        where: dict[str, list[int]] = {}
        for i, described in enumerate(names):
            if described in wanted:
                where.setdefault(described, []).append(i)
        for described, (role, key) in wanted.items():
            at = where.get(described, [])
            if len(at) > 1:  # a name that describes two coordinates: ambiguous
                self.exact = False
                return
            if at:
                self.role[at[0]] = role
                self.slot[at[0]] = len(self.names)
                self.names.append(key)

    def _wanted(self, form: str) -> dict[str, tuple[int, Any]] | None:
        """The description of each coordinate a payload gives, with its role and the
        expert's name or the feature's key; None when the input cannot give it back."""
        s = self.space
        out: dict[str, tuple[int, Any]] = {}
        features: list[Any] = []
        if s.attributes is not None:
            if "feature_names" in s.attributes:
                features = list(s.attributes["feature_names"])
            elif "n_features" in s.attributes:
                features = [str(i) for i in range(s.attributes["n_features"])]
            else:  # hashed: the names are not kept
                return None
        if form == "attributes":
            out.update({f"feature:{f}": (_FEATURE, f) for f in features})
            return out
        if s.experts is not None:
            norms = s.experts["normalize"]
            norms = [norms] if isinstance(norms, str) else list(norms)
            if "raw" not in norms:  # the scores as sent are not kept
                return None
            tail = "" if len(norms) == 1 else "/raw"
            out.update({f"expert:{e}{tail}": (_VOTE, e) for e in s.expert_names})
        out.update({f"feature:{f}@label:{s.labels[0]}": (_FEATURE, f) for f in features})
        return out

    def payload(self, x: Attributes | Experts) -> dict[str, Any] | None:
        """The payload of ``x`` (unchecked: see :func:`exactly`); None when the input
        cannot give it back, or ``x`` has a coordinate beyond it."""
        if not self.exact:
            return None
        coords = x.indices if isinstance(x, Attributes) else x.expert
        values = x.values if isinstance(x, Attributes) else x.value
        if coords.size and int(coords.max()) >= self.role.size:
            return None
        role, slot = self.role[coords], self.slot[coords]
        features: dict[Any, float] = {}
        votes: dict[str, dict[Any, float]] = {}
        classes = None if isinstance(x, Attributes) else x.cls.tolist()
        each = zip(role.tolist(), slot.tolist(), values.tolist(), strict=True)
        for j, (r, i, v) in enumerate(each):
            if r == _FEATURE:
                features[self.names[i]] = v
            elif r == _VOTE and classes is not None:
                votes.setdefault(self.names[i], {})[self.keys[classes[j]]] = v
        out: dict[str, Any] = {}
        if features:
            out["features"] = features
        if votes:
            out["experts"] = votes
        return out


def exactly(
    payloads: list[dict[str, Any] | None],
    xs: Sequence[Attributes | Experts],
    spaces: Sequence[InputSpace | None],
    form: str,
) -> list[dict[str, Any] | None]:
    """Each payload where the input at its entry's place (``spaces``, None: not known)
    encodes it to exactly its instance; else None. Those of one input are encoded
    together."""
    out = list(payloads)
    groups: dict[int, list[int]] = {}
    for t, (p, space) in enumerate(zip(payloads, spaces, strict=True)):
        if p is None or space is None:
            out[t] = None
        else:
            groups.setdefault(id(space), []).append(t)
    for todo in groups.values():
        space = spaces[todo[0]]
        assert space is not None
        encoded = space.encode_each([payloads[t] for t in todo], form)
        for t, y in zip(todo, encoded, strict=True):
            if isinstance(y, Exception) or not _same(xs[t], y):
                out[t] = None
    return out


def _same(a: Attributes | Experts, b: Attributes | Experts) -> bool:
    if isinstance(a, Attributes):
        return (
            isinstance(b, Attributes)
            and np.array_equal(a.indices, b.indices)
            and np.array_equal(a.values, b.values)
        )
    return (
        isinstance(b, Experts)
        and np.array_equal(a.expert, b.expert)
        and np.array_equal(a.cls, b.cls)
        and np.array_equal(a.value, b.value)
    )


def _coordinates(x: Attributes | Experts) -> dict[str, Any]:
    if isinstance(x, Attributes):
        return {"indices": x.indices.tolist(), "values": x.values.tolist()}
    return {"experts": x.expert.tolist(), "classes": x.cls.tolist(), "values": x.value.tolist()}


_tables: OrderedDict[tuple[bytes, str], Payloads] = OrderedDict()


def payloads_of(space: InputSpace, form: str) -> Payloads:
    """The :class:`Payloads` of an input, kept for the pages that follow."""
    key = (orjson.dumps(space.config()), form)
    got = _tables.get(key)
    if got is None:
        got = _tables[key] = Payloads(space, form)
        if len(_tables) > _KEPT:
            _tables.popitem(last=False)
    else:
        _tables.move_to_end(key)
    return got


@dataclass(frozen=True, slots=True)
class Inputs:
    """A model's input at each version from ``known_from`` on: ``base`` there, then after
    each change entry in ``changes`` (its seq, the input after it), in order."""

    known_from: int
    base: InputSpace
    changes: list[tuple[int, InputSpace]]

    def at(self, version: int) -> InputSpace | None:
        """The input at ``version`` (after its entry); None when it is not known."""
        if version < self.known_from:
            return None
        got = self.base
        for seq, space in self.changes:
            if seq > version:
                break
            got = space
        return got


_inputs: OrderedDict[tuple[str, str, tuple[tuple[int, str], ...]], Inputs] = OrderedDict()


async def inputs_of(service: ModelService, stored: StoredModel) -> Inputs:
    """The model's input at each version the log holds: its input as made and its
    changes, found from its marks (its latest :data:`MARKS` changes and imports) and
    their entries; when it has had more, or the log no longer holds their entries, from
    its snapshot's input on (the versions before it not known)."""
    name, marks = stored.name, tuple(stored.marks)
    key = (name, stored.incarnation, marks)
    got = _inputs.get(key)
    if got is not None:
        return got
    limits = service.replicas.limits
    changes: dict[int, bytes | None] = {}
    for seq, _ in marks:
        entries = await service.store.read_log(name, seq - 1, 1, upto=seq)
        e = entries[0] if entries and _seq(entries[0][0]) == seq else None
        if e is None or entry_kind(e[1]) == b"c":
            changes[seq] = None if e is None else _field(e[1], b"c")
    if len(marks) < MARKS and None not in changes.values():  # every change since made
        known_from, base = 0, plan_model(stored.config, limits)[0]
    else:
        snap = await service.store.read_snapshot(name)
        oldest = min((seq for seq, _ in marks), default=0)
        if snap is None or (len(marks) >= MARKS and oldest > snap.version):
            known_from, base = _UNKNOWN, plan_model(stored.config, limits)[0]
        else:
            known_from = snap.version
            base = plan_model(with_space(stored.config, snap.space), limits)[0]
        if any(v is None for seq, v in changes.items() if seq > known_from):
            known_from = _UNKNOWN
    timeline: list[tuple[int, InputSpace]] = []
    space = base
    for seq in sorted(changes):
        raw = changes[seq]
        if seq <= known_from or raw is None:
            continue
        try:  # a change no worker could take was skipped alike (quarantined)
            space = space.changed(orjson.loads(raw))
        except (InvalidParameter, InvalidInstance, orjson.JSONDecodeError):
            continue
        timeline.append((seq, space))
    got = _inputs[key] = Inputs(known_from, base, timeline)
    if len(_inputs) > _KEPT:
        _inputs.popitem(last=False)
    return got


def _field(fields: list[bytes], name: bytes) -> bytes | None:
    for i in range(0, len(fields) - 1, 2):
        if fields[i] == name:
            return fields[i + 1]
    return None


def lines_of(
    entries: Sequence[RawEntry], latest: InputSpace, inputs: Inputs, form: str
) -> list[bytes]:
    """The NDJSON lines of log entries, read by the model's ``latest`` input (which reads
    every earlier entry alike), their payloads checked by ``inputs`` (see the module)."""
    decoded = decode_entries(entries, latest.size(form), latest.n_classes)
    trials = [e for e in decoded if isinstance(e, LogEntry) and e.x is not None]
    xs = [e.x for e in trials if e.x is not None]
    given = payloads_of(latest, form)
    payloads = exactly([given.payload(x) for x in xs], xs, [inputs.at(e.seq) for e in trials], form)
    by_seq = {e.seq: p for e, p in zip(trials, payloads, strict=True)}
    labels = latest.labels
    out = []
    for (entry_id, _), e in zip(entries, decoded, strict=True):
        if isinstance(e, CorruptData):
            doc: dict[str, Any] = {"seq": _seq(entry_id), "kind": "unreadable", "error": str(e)}
        elif e.kind == "change":
            change = orjson.loads(e.change)
            if isinstance(change, dict) and "challenger" in change:  # not of the input
                doc = {"seq": e.seq, "kind": "challenger", "challenger": change["challenger"]}
            else:
                doc = {"seq": e.seq, "kind": "change", "change": change}
        elif e.kind == "reset" or e.x is None:
            doc = {"seq": e.seq, "kind": "reset"}
        else:
            doc = {"seq": e.seq, "kind": e.kind}
            if e.kind == "label":
                doc["trial_id"] = e.trial_id
            p = by_seq[e.seq]
            if p is None:
                doc["x"] = _coordinates(e.x)
            else:
                doc["instance"] = p
            doc["label"] = labels[e.y]
            if e.kind == "label" and e.predicted is not None:
                doc["predicted"] = labels[e.predicted]
                if e.served_at >= 0:
                    doc["served_at"] = e.served_at
        out.append(orjson.dumps(doc, option=orjson.OPT_APPEND_NEWLINE))
    return out


async def read_page(service: ModelService, name: str, after: int, limit: int) -> LogPage:
    """The entries of model ``name``'s log after version ``after``, at most ``limit``.

    Raises :class:`BadInput` naming ``from`` for a version beyond the model's, or one
    whose next entries the log no longer holds (a snapshot took their place: the answer
    names the first version it can start from), and ``limit`` beyond
    ``max_log_entries``."""
    most = service.settings.max_log_entries
    if limit > most:
        raise BadInput("limit", f"{limit}: expected at most {most} (max_log_entries)", "query")
    stored = await service.store.read(name)
    head = stored.version
    if after > head:
        raise BadInput("from", f"{after}: beyond the model's version, {head}", "query")
    entries: list[RawEntry] = []
    if after < head:
        entries = await service.store.read_log(name, after, limit, upto=head)
        first = _seq(entries[0][0]) if entries else None
        if first != after + 1:  # a snapshot took their place
            count, held = await service.store.log_bounds(name)
            where = f"ask from={held - 1} or later" if count else "it holds none after it"
            raise BadInput(
                "from",
                f"{after}: the log of model {name!r} no longer holds the entries after it: "
                f"{where} (the model's snapshot holds what came before: see GET .../versions)",
                "query",
            )
    again = await service.store.read(name)
    if again.incarnation != stored.incarnation:
        raise Conflict(f"model {name!r} was deleted and made again meanwhile: ask again")
    if not entries:
        return LogPage([], after, head)
    inputs = await inputs_of(service, stored)
    latest, form = plan_model(stored.current, service.replicas.limits)
    lines = await asyncio.to_thread(lines_of, entries, latest, inputs, form)
    return LogPage(lines, _seq(entries[-1][0]), head)


def _seq(entry_id: bytes) -> int:
    return parse_int(entry_id.split(b"-", 1)[0], "log entry id", 1)
