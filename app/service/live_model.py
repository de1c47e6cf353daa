"""A model as one worker holds it: the learner, kept in step with the model's log.

The log in Redis is the truth; the learner is a deterministic function of it. A worker
replays every entry it has not seen, in log order, whoever appended it, and so computes
each trial's outcome itself. Outcomes not yet known to be folded into the shared counters
are kept and reported with the worker's next script call (:mod:`storage.scripts`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import numpy as np
import orjson

from app.core.errors import BadInput
from app.service.budget import Limits, check_labels, check_learner
from app.service.challenger import Challenger, export_model, read_model
from app.service.monitor import Monitor
from app.service.monitors import fresh_monitors, read_monitors, relearned
from models.core.instance import AttributeBatch, Attributes, ExpertBatch, Experts, InvalidInstance
from models.core.learner import CannotGrow, Learner, UpdateRefused
from models.core.params import InvalidParameter
from models.core.state import InvalidState
from models.inputs.space import InputSpace
from models.registry import build, kind_of
from storage.codec import (
    LogEntry,
    decode_entries,
    decode_entry,
    entry_kind,
    entry_stamp,
    fold_id,
    held_or_decoded,
)
from storage.errors import CorruptData, StorageError
from storage.repository import LogGap, RawEntry, Saved, Sync, with_space

__all__ = [
    "Applied",
    "CopyFailed",
    "Kept",
    "LiveModel",
    "LogRange",
    "Start",
    "StateReplaced",
    "build_model",
    "plan_model",
]

log = logging.getLogger("committee.live")
T = TypeVar("T")
RECENT = 1 << 14  # outcomes kept for answering requests, by log seq
FOLD_BATCH = 5_000  # outcomes reported per script call at most
BATCH_REPLAY = 16  # own learn entries replayed in one compiled call from this many
RESEND = 1.0  # seconds after which unacknowledged outcomes are reported again
QUARANTINED, REFUSED = 2, 3  # outcomes beyond 0 (no update) and 1 (updated)
CHANGED = 4  # the outcome of a change entry: no trial
# what holding one instance costs beside its arrays and stored bytes: the instance, its
# array objects and its place in the table (about 740 bytes for sub-experts, measured)
KEPT_ENTRY = 768
# an instance's stored bytes -> the instance they decode to, when held (else None)
Known = Callable[[bytes], Attributes | Experts | None]


class Kept:
    """The instances of the predictions this worker stored pending, by their stored
    bytes: the label of one is then applied from the instance in memory, as a learn this
    worker appended is (:meth:`LiveModel.apply_own`), not decoded again from its copy in
    the log. Equal bytes decode to an equal instance, whichever model or worker stored
    them, so the one held is the one decoding would give. Each is taken once; the oldest
    are dropped first so that at most ``most`` bytes are held.

    An instance of a group or a batch views the arrays of all its instances: it is held
    as it is, and what it holds is counted as it is retained, each buffer once while any
    held instance views it (released with the last), beside each instance's stored bytes
    and :data:`KEPT_ENTRY`. A batch labelled all but one item so keeps the batch's
    arrays counted. An instance whose buffers alone would not fit is held over copies of
    its own arrays."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.held = 0  # bytes, as counted
        self.hits = 0  # instances taken
        # in the order put: the oldest leaves at O(1) (a dict's first key is found by
        # walking past every slot emptied since it last grew)
        # each with its share of the buffers it views: [those buffers, instances held]
        self._by: OrderedDict[bytes, tuple[Attributes | Experts, list[Any]]] = OrderedDict()
        # id of a buffer the held instances view -> [the buffer, shares of it held, bytes]
        self._buffers: dict[int, list[Any]] = {}

    def __len__(self) -> int:
        return len(self._by)

    def put(self, data: bytes, x: Attributes | Experts) -> None:
        """Hold ``x``, stored as ``data``."""
        self.put_many(((data, x),))

    def put_many(self, pairs: Iterable[tuple[bytes, Attributes | Experts]]) -> None:
        """Hold each instance, stored as the bytes beside it: those of one group or batch
        view the same buffers, found once and counted as one share of them."""
        by, most = self._by, self.most
        found: dict[tuple[int, ...], list[Any]] = {}  # views -> [owners, instances held]
        for data, x in pairs:
            if data in by:
                continue
            size = len(data) + KEPT_ENTRY
            views = _views(x)
            share = found.get(views) if views else None
            new = 0
            # the first of its group here, or one after the group's held instances all
            # gave way (to one too large to be held beside its buffers): its buffers
            if share is None or not share[1]:
                owners = _owners(x) if share is None else share[0]
                new = sum([_nbytes(o) for o in owners if id(o) not in self._buffers])
                if size + new > most:  # its buffers would not fit: copies of its own arrays
                    x = _own(x)
                    owners = _owners(x)
                    new = sum([_nbytes(o) for o in owners])
                    share = None
                    views = None
                if size + new > most:
                    continue
                if share is None:
                    share = [owners, 0]
                    if views:
                        found[views] = share
                self._enter(owners)
            elif size > most:
                continue
            share[1] += 1
            by[data] = (x, share)
            self.held += size + new
            while self.held > most:
                self._release(*by.popitem(last=False))

    def take(self, data: bytes) -> Attributes | Experts | None:
        """The instance stored as ``data``, no longer held; None when none is."""
        got = self._by.pop(data, None)
        if got is None:
            return None
        self.hits += 1
        self._release(data, got)
        return got[0]

    def _enter(self, owners: list[Any]) -> None:
        """Count a share of ``owners``: each buffer held while any share of it is."""
        buffers = self._buffers
        for o in owners:
            held = buffers.get(id(o))
            if held is None:
                buffers[id(o)] = [o, 1, _nbytes(o)]
            else:
                held[1] += 1

    def _release(self, data: bytes, held: tuple[Attributes | Experts, list[Any]]) -> None:
        """Count an instance stored as ``data``, with its share of buffers, no longer
        held."""
        freed = len(data) + KEPT_ENTRY
        share = held[1]
        share[1] -= 1
        if not share[1]:  # the share's last instance: its buffers, each once
            buffers = self._buffers
            for o in share[0]:
                b = buffers[id(o)]
                b[1] -= 1
                if not b[1]:
                    del buffers[id(o)]
                    freed += b[2]
        self.held -= freed


def _views(x: Attributes | Experts) -> tuple[int, ...] | None:
    """What ``x``'s arrays view, as ids: instances alike in it have the same owners (None
    when an array owns its memory)."""
    arrays = (x.expert, x.cls, x.value) if isinstance(x, Experts) else (x.indices, x.values)
    bases = tuple([id(a.base) for a in arrays if a.base is not None])
    return bases if len(bases) == len(arrays) else None


def _owners(x: Attributes | Experts) -> list[Any]:
    """The objects that hold the memory of ``x``'s arrays, each once: an array that owns
    its memory, else the array (or bytes) at the end of its bases."""
    out: list[Any] = []
    ids: list[int] = []
    arrays = (x.expert, x.cls, x.value) if isinstance(x, Experts) else (x.indices, x.values)
    for a in arrays:
        o = a.base
        if o is None:
            o = a
        else:
            while type(o) is np.ndarray and o.base is not None:
                o = o.base
        if id(o) not in ids:
            ids.append(id(o))
            out.append(o)
    return out


def _nbytes(o: Any) -> int:
    return o.nbytes if isinstance(o, np.ndarray) else memoryview(o).nbytes


def _own(x: Attributes | Experts) -> Attributes | Experts:
    """``x`` over arrays of its own, read-only as an instance's arrays are (each read
    from bytes of its own: quicker than a copy made read-only)."""
    if isinstance(x, Experts):
        e, c, v = x.expert, x.cls, x.value
        y = Experts.__new__(Experts)
        y.expert, y.cls, y.value, y.source = _copy(e), _copy(c), _copy(v), None
        y.size, y.n_classes, y.low, y.high = x.size, x.n_classes, x.low, x.high
        return y
    i, w = x.indices, x.values
    z = Attributes.__new__(Attributes)
    z.indices, z.values, z.source = _copy(i), _copy(w), None
    z.size, z.low, z.high = x.size, x.low, x.high
    return z


def _copy(a: np.ndarray) -> np.ndarray:
    return np.frombuffer(a.tobytes(), a.dtype).reshape(a.shape)


class StateReplaced(LogGap):
    """The log says the state was replaced (an import): reload from the snapshot."""


class CopyFailed(StateReplaced):
    """Replaying the log raised part-way through an entry (a fault of this worker, not of
    the entry, which :meth:`LiveModel._quarantine` would skip alike everywhere): the copy
    may hold a change its version does not count. It is never used again; the model is
    loaded anew."""


def _active(x: Attributes | Experts) -> int:
    """The non-zero values of an instance."""
    return len(x.indices if isinstance(x, Attributes) else x.expert)


class Applied(NamedTuple):
    """What replaying one log entry gave: the class judged against (served or predicted
    at replay) and whether the learner updated."""

    predicted: int
    updated: bool


def plan_model(config: dict[str, Any], limits: Limits) -> tuple[InputSpace, str]:
    """The input space and learner form of a model config, checked against ``limits``
    (its learner's estimated bytes included) without building the learner.

    Raises :class:`~app.core.errors.BadInput` naming the offending field.
    """
    check_labels(config["labels"], limits)
    inp = config["input"]
    try:
        space = InputSpace(
            config["labels"],
            attributes=inp.get("attributes"),
            experts=inp.get("experts"),
            generations=inp.get("generations"),
            max_derived_experts=limits.derived_experts,
        )
    except (InvalidParameter, InvalidInstance) as e:
        name = getattr(e, "name", "")
        field = "labels" if name == "labels" else f"input.{name}" if name else "input"
        raise BadInput(field, str(e)) from None
    spec = config["learner"]
    try:
        cls = kind_of(spec)
        form = cls.input_kind_for({k: v for k, v in spec.items() if k != "kind"})
        if form not in space.forms:
            raise BadInput(
                "learner.kind",
                f"{spec['kind']} takes {form}, but this model's input gives "
                + " or ".join(space.forms)
                + (" (it has experts: use a multi-class learner)" if form == "attributes" else ""),
            )
        active = config.get("max_active")
        check_learner(spec, list(space.labels), space.size(form), limits, active)
    except InvalidParameter as e:
        raise BadInput(f"learner.{e.name}", str(e)) from None
    return space, form


def build_model(
    config: dict[str, Any], limits: Limits | None = None
) -> tuple[InputSpace, str, Learner]:
    """The input space, learner form and fresh learner a model config describes, once
    :func:`plan_model` has checked it.

    Raises :class:`~app.core.errors.BadInput` naming the offending field.
    """
    space, form = plan_model(config, limits or Limits())
    try:
        learner = build(config["learner"], labels=space.labels, size=space.size(form))
    except InvalidParameter as e:
        raise BadInput(f"learner.{e.name}", str(e)) from None
    return space, form, learner


class LiveModel:
    """One model's learner at log version ``version`` and what this worker knows of it."""

    def __init__(
        self,
        name: str,
        incarnation: str,
        config: dict[str, Any],
        *,
        version: int = 0,
        folded: int = 0,
        state: bytes | None = None,
        stamp: str = "",
        snapshot_every: int = 10_000,
        limits: Limits | None = None,
        space: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.incarnation = incarnation
        # the config with the input the model has at ``version`` (``space``: its input
        # since a change, None as made)
        self.config = config = with_space(config, space)
        self.changed = space is not None
        # the learner a promoted challenger made the model's (None: the one it was made with)
        self.promoted: dict[str, Any] | None = (space or {}).get("learner")
        self.limits = limits
        self.space, self.form, self.learner = build_model(config, limits)
        self.challengers: dict[str, Challenger] = {}
        # what follows the judged trials beside the learner (app.service.monitors)
        self.monitors: dict[str, Monitor] = fresh_monitors(self.space, self.form, self.learner)
        names = (space or {}).get("challengers", [])
        try:
            if state is not None:
                labels, size = list(self.space.labels), self.space.size(self.form)
                self.challengers, monitors = read_model(
                    orjson.loads(state), self.learner, labels, size
                )
                self.monitors = read_monitors(monitors, self.space, self.form, self.learner)
            if list(self.challengers) != names:
                raise InvalidState(f"challengers {list(self.challengers)}, its input names {names}")
        except (InvalidState, orjson.JSONDecodeError) as e:
            raise CorruptData(f"model {name!r}: snapshot at version {version}: {e}") from None
        self._sizes(snapshot_every)
        self.ttl_ms = int(config["label_ttl"] * 1000)
        self.max_active: int | None = config.get("max_active")
        self.version = version
        # the stamp of the log entry at ``version`` ("" unknown): each script call shows it,
        # and one finds out so if the log there is no longer what this worker applied
        self.stamp = stamp
        self.snapshot_version = version
        self.folded = max(folded, version)
        self.unfolded: dict[int, tuple[int, int, int, str]] = {}
        self.fold_sent, self.fold_sent_at = self.folded, 0.0
        self.recent: dict[int, Applied] = {}
        self.synced_at = time.monotonic()
        self.summary_version, self.summary_at = -1, 0.0
        self.used = 0  # when this worker last used the model (see Replicas.live)
        self.quarantined = 0  # log entries this worker could not replay and skipped
        # set when a replay raised part-way (CopyFailed): nothing is applied, folded or
        # snapshotted from this copy again
        self.broken = False
        # cleared while a thread reads the learner (a snapshot): nothing may change it then
        self.unfrozen = asyncio.Event()
        self.unfrozen.set()

    def _sizes(self, snapshot_every: int) -> None:
        """What follows from the input space."""
        self.labels = self.space.labels
        self.label_keys = [str(lab) for lab in self.labels]  # the keys of answered scores
        # learned trials' answers by (predicted, label, updated), shared (app.service.trial_calls)
        self.judgements: dict[tuple[int, int, bool], Any] = {}
        self.k = len(self.labels)
        self.size = self.space.size(self.form)
        # larger models snapshot less often, so snapshots cost O(1) per trial amortised
        self.snapshot_base = snapshot_every
        self.snapshot_every = max(snapshot_every, self.size * self.k // 16)

    def changed_space(self, change: Any, limited: bool = True) -> tuple[InputSpace, Learner]:
        """The input space and learner after ``change`` (see
        :meth:`~models.inputs.space.InputSpace.changed`), this model left as it is;
        ``limited``: checked against this worker's limits too (not at replay, where every
        worker must do alike whatever its settings).

        Raises :class:`~app.core.errors.BadInput` naming the offending field.
        """
        try:
            space = self.space.changed(change)
        except (InvalidParameter, InvalidInstance) as e:
            raise BadInput(getattr(e, "name", "") or "change", str(e)) from None
        if limited:  # the budgets, for the larger model
            plan_model(with_space(self.config, space.config()), self.limits or Limits())
        try:
            learner = self.learner.grown(space.size(self.form), np.arange(self.size), space.labels)
        except CannotGrow as e:
            raise BadInput("learner", str(e)) from None
        return space, learner

    def space_doc(
        self, promoted: dict[str, Any] | bool | None = True, names: list[str] | None = None
    ) -> bytes:
        """The input as a snapshot keeps it, with the learner a promoted challenger made
        the model's and the challengers' names: b"" while all are as the model was made.
        ``promoted`` (True: this model's) and ``names`` (None: this model's) give others."""
        learner = self.promoted if promoted is True else promoted
        names = list(self.challengers) if names is None else names
        if not (self.changed or learner or names):
            return b""
        doc = self.space.config()
        if learner:
            doc["learner"] = learner
        if names:
            doc["challengers"] = names
        return orjson.dumps(doc)

    @contextlib.asynccontextmanager
    async def frozen(self) -> AsyncIterator[None]:
        """Hold every change to the learner back while the block runs (one at a time)."""
        await self.thawed()
        self.unfrozen.clear()
        try:
            yield
        finally:
            self.unfrozen.set()

    async def thawed(self) -> None:
        """Wait until no thread reads the learner, before changing it."""
        while not self.unfrozen.is_set():
            await self.unfrozen.wait()

    # -- instances --------------------------------------------------------------------

    def encode(self, payload: Any) -> Attributes | Experts:
        """The instance for ``payload``, checked by the learner too (value ranges), so
        that nothing the log takes in can fail at replay."""
        x = self.encode_each([payload])[0]
        if isinstance(x, Exception):
            raise x
        return x

    def encode_each(
        self, payloads: Sequence[Any]
    ) -> list[Attributes | Experts | InvalidInstance | InvalidParameter]:
        """:meth:`encode` of each payload, or the error it raises, in order."""
        out = self.space.encode_each(payloads, self.form)
        good = [x for x in out if not isinstance(x, Exception)]
        if (
            good
            and self.learner.fits_all(good)
            and (self.max_active is None or max(map(_active, good)) <= self.max_active)
        ):
            return out  # as each would be checked below, all at once
        for t, x in enumerate(out):
            if not isinstance(x, Exception):
                try:
                    out[t] = y = self.learner.coerce(x)
                    active = _active(y)
                    if self.max_active is not None and active > self.max_active:
                        raise InvalidInstance(
                            f"{active} non-zero values: this model takes at most "
                            f"{self.max_active} (max_active)"
                        )
                except (InvalidInstance, InvalidParameter) as e:
                    out[t] = e
        return out

    def predict(self, x: Attributes | Experts) -> tuple[int, np.ndarray]:
        """The predicted class and per-label scores of the current hypothesis."""
        c, s = self.learner.decide(x)  # the learner's classes are the space's, in order
        return c, np.asarray(s, dtype=np.float64)

    def predict_many(self, xs: Sequence[Attributes | Experts]) -> list[tuple[int, np.ndarray]]:
        """:meth:`predict` of each of ``xs``, worked out together."""
        return [(c, np.asarray(s, dtype=np.float64)) for c, s in self.learner.decide_many(xs)]

    # -- the log ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _replaying(self) -> Iterator[None]:
        """Around every change the log makes to this copy: one that raises anything but
        what the replay raises on purpose (a gap, a replaced state, what Redis returned)
        leaves the copy :attr:`broken`, and raises :class:`CopyFailed`."""
        if self.broken:
            raise CopyFailed(f"model {self.name!r}: this copy failed before; load it anew")
        try:
            yield
        except StorageError:  # LogGap, StateReplaced, CorruptData: raised before a change
            raise
        except Exception as e:
            self.broken = True
            log.exception("model %s: replaying the log after %d failed", self.name, self.version)
            raise CopyFailed(
                f"model {self.name!r}: replaying the log after version {self.version} "
                f"failed ({e!r}); load it anew"
            ) from e

    def apply(self, entries: Iterable[RawEntry], known: Known | None = None) -> None:
        """Replay log entries in order, skipping those already applied. The entries up to
        the next change of the input are decoded together, against the input as it is;
        an instance ``known`` holds (see :class:`Kept`) is taken from it instead."""
        with self._replaying():
            self._apply(entries, known)

    def _apply(self, entries: Iterable[RawEntry], known: Known | None) -> None:
        entries = entries if isinstance(entries, list) else list(entries)
        decoded: dict[int, LogEntry | CorruptData] = {}
        for at, (entry_id, fields) in enumerate(entries):
            seq = _seq_of(entry_id)
            if seq <= self.version:
                continue
            if seq != self.version + 1:
                raise LogGap(f"model {self.name!r}: log entry {seq} after {self.version}")
            if at not in decoded:
                decoded = self._decoded(entries, at, known)
            try:
                stamp = entry_stamp(fields)
                got = decoded.pop(at)
                if isinstance(got, CorruptData):
                    raise got
                e = got
            except CorruptData as exc:
                self._quarantine(seq, exc)
                self.stamp = ""  # unknown: the next call is not checked against it
                continue
            if e.kind == "change":
                self._change(seq, e.change)
            elif e.x is None:
                raise StateReplaced(f"model {self.name!r}: state replaced at version {seq}")
            else:
                self._replay(e.seq, e.x, e.y, e.predicted, e.trial_id)
            self.stamp = stamp
        self.synced_at = time.monotonic()

    def _decoded(
        self, entries: list[RawEntry], at: int, known: Known | None = None
    ) -> dict[int, LogEntry | CorruptData]:
        """The entries from ``at`` on up to the next change entry (or that one alone),
        decoded together, by their place in ``entries``."""
        end = at + 1
        if entry_kind(entries[at][1]) != b"c":
            while end < len(entries) and entry_kind(entries[end][1]) != b"c":
                end += 1
        got = decode_entries(entries[at:end], self.size, self.k, known)
        return dict(enumerate(got, at))

    def grow_through(self, entries: Iterable[RawEntry]) -> None:
        """Apply only the change entries among ``entries`` (after this model's version):
        the learner as it is, over the input those changes lead to. The model's version
        is then that of the last entry, though it learned none of the trials: a copy for
        a rollback, never one that serves."""
        for entry_id, fields in entries:
            seq = _seq_of(entry_id)
            if seq <= self.version:
                continue
            if entry_kind(fields) == b"c":  # the challengers as they were: only growing
                raw = decode_entry(entry_id, fields, self.size, self.k).change
                exc = self.take_change(seq, raw, grow_only=True)
                if exc is not None:
                    self._quarantine(seq, exc)
            self.version = seq

    def _change(self, seq: int, raw: bytes) -> None:
        """Replay a change of the input: the learner grows in place of the entry."""
        exc = self.take_change(seq, raw)
        if exc is not None:  # alike on every worker
            self._quarantine(seq, exc)
            return
        self._record(seq, 0, 0, CHANGED, "")

    def take_change(self, seq: int, raw: bytes, grow_only: bool = False) -> Exception | None:
        """Take the change of log entry ``seq`` (its JSON): a change of input (the
        learner and the challengers grow) or of challengers (skipped when
        ``grow_only``). None when taken; else why it cannot be, the model left as it is."""
        try:
            change = orjson.loads(raw)
            if isinstance(change, dict) and "challenger" in change:
                if not grow_only:
                    self._challenger(seq, change["challenger"])
                self.version = seq
                return None
            space, learner = self.changed_space(change, limited=False)
        except (BadInput, orjson.JSONDecodeError) as exc:
            return exc
        for mon in self.monitors.values():
            mon.grown(space)
        kept = np.arange(self.size)
        for c in list(self.challengers.values()):
            try:
                c.grown(space.size(self.form), kept, space.labels)
            except CannotGrow as exc:  # alike on every worker: it leaves
                log.warning("model %s: challenger %s retired: %s", self.name, c.name, exc)
                del self.challengers[c.name]
        self.space, self.learner, self.changed = space, learner, True
        self.monitors = relearned(self.monitors, space, self.form, learner)
        self.config = with_space(self.config, space.config())
        self._sizes(self.snapshot_base)
        self.version = seq
        return None

    def _challenger(self, seq: int, op: Any) -> None:
        """Attach, retire or promote a challenger (a change entry's ``challenger``);
        :class:`BadInput` for one that does not fit this model, alike on every worker."""
        if not isinstance(op, dict) or op.get("op") not in ("attach", "retire", "promote"):
            raise BadInput("challenger", "expected an attach, retire or promote")
        name = op.get("name")
        if not isinstance(name, str):
            raise BadInput("challenger.name", "expected a name")
        if op["op"] == "attach":
            if name in self.challengers:
                raise BadInput("name", f"{name!r}: the model has a challenger of that name")
            self.challengers[name] = self.challenger(name, op.get("learner"), seq)
            return
        c = self.challengers.pop(name, None)
        if c is None:
            raise BadInput("name", f"{name!r}: the model has no challenger of that name")
        if op["op"] == "promote":
            self.learner, self.promoted = c.learner, c.spec
            self.monitors = relearned(self.monitors, self.space, self.form, c.learner)
            self.config = {**self.config, "learner": c.spec}

    def challenger(self, name: str, spec: Any, attached: int) -> Challenger:
        """A new challenger ``spec`` for this model (:class:`BadInput` naming the field
        when the spec cannot learn from its input)."""
        if not isinstance(spec, dict):
            raise BadInput("learner", "expected an object")
        try:
            cls = kind_of(spec)
            form = cls.input_kind_for({k: v for k, v in spec.items() if k != "kind"})
        except InvalidParameter as e:
            raise BadInput(f"learner.{e.name}" if e.name else "learner", str(e)) from None
        if form != self.form:
            raise BadInput(
                "learner.kind",
                f"{spec.get('kind')} takes {form}; this model's learner takes {self.form}",
            )
        try:
            return Challenger.fresh(name, spec, attached, list(self.space.labels), self.size)
        except InvalidParameter as e:
            raise BadInput(f"learner.{e.name}" if e.name else "learner", str(e)) from None

    def _quarantine(self, seq: int, exc: Exception) -> None:
        """Skip log entry ``seq``: every worker finds the same fault in it and skips it
        alike; it is counted (``quarantined``) rather than failing the model forever."""
        log.error("model %s: log entry %d quarantined: %s", self.name, seq, exc)
        self.quarantined += 1
        self.version = seq
        self._record(seq, 0, -1, QUARANTINED, "")

    def apply_own(
        self,
        first: int,
        items: Iterable[tuple[Attributes | Experts, int]],
        key: str | Sequence[str] = "",
        stamp: str = "",
    ) -> None:
        """Replay learn entries this worker appended from ``first`` on, from the
        instances it encoded rather than from their copies in Redis. ``key`` is the
        idempotency key they were appended under, if any (see
        :func:`storage.codec.fold_id`), or one such key per entry; ``stamp`` the stamp of
        the call that did."""
        with self._replaying():
            self._apply_own(first, items, key, stamp)

    def _apply_own(
        self,
        first: int,
        items: Iterable[tuple[Attributes | Experts, int]],
        key: str | Sequence[str],
        stamp: str,
    ) -> None:
        todo = list(items)
        keys = itertools.repeat(key, len(todo)) if isinstance(key, str) else key
        tags = [fold_id(k) for k in keys]
        start, todo = self._unapplied(first, todo)
        first, tags = start, tags[start - first :]
        if self.challengers:  # each trial judges them too: one by one
            for seq, (x, y), tag in zip(itertools.count(first), todo, tags, strict=False):
                self._replay(seq, x, y, None, tag)
            if todo:
                self.stamp = stamp
            return
        compiled = True  # until the compiled run does not take them
        while todo:
            done: int | None = 0
            if compiled and len(todo) >= BATCH_REPLAY:
                done = self._replay_compiled(first, todo, tags)
                compiled = done is not None
            done = done or 0
            if done < len(todo):  # one by one from the first not applied compiled
                x, y = todo[done]
                self._replay(first + done, x, y, None, tags[done])
                done += 1
            first += done
            todo, tags = todo[done:], tags[done:]
            self.stamp = stamp

    def _unapplied(self, first: int, items: Iterable[T]) -> tuple[int, list[T]]:
        """Of ``items``, the entries from ``first`` on, those not applied yet and the
        first one's seq; :class:`LogGap` when they do not follow this model's version."""
        todo = list(items)
        if self.version >= first:  # some were applied already
            todo = todo[self.version + 1 - first :]
            first = self.version + 1
        if todo and first != self.version + 1:
            raise LogGap(f"model {self.name!r}: log entry {first} after {self.version}")
        return first, todo

    def apply_labels(
        self,
        first: int,
        items: Sequence[tuple[bytes, int, int, str]],
        stamp: str = "",
        known: Known | None = None,
    ) -> None:
        """Replay label entries this worker appended from ``first`` on, from what the
        script answered rather than from their copies in the log: each trial's instance as
        the entry keeps it, its class, the prediction served and the trial id. Each is
        decoded (or taken from ``known``) and checked as :meth:`apply` does an entry of
        the log, and what fails is quarantined as every worker reading the entry does."""
        with self._replaying():
            self._apply_labels(first, items, stamp, known)

    def _apply_labels(
        self,
        first: int,
        items: Sequence[tuple[bytes, int, int, str]],
        stamp: str,
        known: Known | None,
    ) -> None:
        first, todo = self._unapplied(first, items)
        xs = held_or_decoded([data for data, _, _, _ in todo], self.size, self.k, known)
        top = self.k - 1
        for seq, x, (_, y, p, trial_id) in zip(itertools.count(first), xs, todo, strict=False):
            if not isinstance(x, CorruptData) and not (0 <= y <= top and 0 <= p <= top):
                what, n = ("label", y) if not 0 <= y <= top else ("prediction", p)
                x = CorruptData(f"log entry {seq} {what} is {n}: expected 0..{top}")
            if isinstance(x, CorruptData):
                self._quarantine(seq, x)
                self.stamp = ""  # unknown: the next call is not checked against it
                continue
            self._replay(seq, x, y, p, trial_id)
            self.stamp = stamp

    def _replay_compiled(
        self, first: int, todo: list[tuple[Attributes | Experts, int]], tags: list[str]
    ) -> int | None:
        """Learn a run of trials in one compiled call where the learner has one (a binary
        learner over attributes, or one over sub-experts' votes), with the same results
        as one by one; returns how many were applied, or None where the learner has no
        such run or it does not take them (then one by one, which says what is wrong)."""
        xs = [x for x, _ in todo]
        ys = [y for _, y in todo]
        labels = [self.labels[y] for y in ys]
        learn_classes = getattr(self.learner, "learn_expert_classes", None)
        learn_prefix = getattr(self.learner, "learn_prefix", None)
        try:
            if learn_classes is not None and type(xs[0]) is Experts:
                votes = [x for x in xs if type(x) is Experts]
                got, updates, done = learn_classes(ExpertBatch.from_instances(votes), labels)
                predicted = got[:done].tolist()
            elif learn_prefix is not None and self.k == 2:
                mistakes, updates, done = learn_prefix(AttributeBatch.from_instances(xs), labels)
                y = np.array(ys[:done], dtype=np.int64)
                predicted = np.where(mistakes[:done], 1 - y, y).tolist()
            else:
                return None
        except (InvalidInstance, ValueError, TypeError):
            return None
        ys = ys[:done]
        self._record_run(
            first, ys, predicted, updates[:done].astype(np.int64).tolist(), tags[:done]
        )
        for mon in self.monitors.values():
            mon.judged_run(first, [x for x, _ in todo[:done]], ys, predicted)
        self.version = first + done - 1 if done else self.version
        return int(done)

    def _replay(
        self, seq: int, x: Attributes | Experts, y: int, served: int | None, trial_id: str
    ) -> None:
        try:
            predicted, updated = self.learner.trial(x, self.labels[y])
            outcome = int(updated)
        except UpdateRefused as exc:
            # a learner that refuses an update (Balanced Winnow beyond float range, say)
            # refuses it whole and says what it predicted, the same on every worker
            log.warning("model %s: log entry %d not learned: %s", self.name, seq, exc)
            predicted, updated, outcome = exc.predicted, False, REFUSED
        except Exception as exc:  # a fault of this entry, found alike by every worker
            self._quarantine(seq, exc)
            return
        own = predicted
        if served is not None:  # a label: judged against the prediction served
            predicted = served
        for c in self.challengers.values():
            c.judge(x, y, self.labels[y], predicted, own)
        for mon in self.monitors.values():
            mon.judged(seq, x, y, predicted, own)
        self.version = seq
        self._record(seq, y, predicted, outcome, trial_id)

    def _record(self, seq: int, y: int, predicted: int, outcome: int, trial_id: str) -> None:
        """Keep a replayed entry's outcome (``outcome`` as folded: 0 no update, 1 updated,
        :data:`QUARANTINED`, :data:`REFUSED`)."""
        self.recent[seq] = Applied(predicted, outcome == 1)
        self.recent.pop(seq - RECENT, None)
        if seq > self.folded:
            self.unfolded[seq] = (y, predicted, outcome, trial_id)

    def _record_run(
        self, first: int, ys: list[int], predicted: list[int], outcomes: list[int], tags: list[str]
    ) -> None:
        """:meth:`_record` of the entries from ``first`` on, together (``tags`` their
        trial ids, one each)."""
        end = first + len(ys)
        pairs = list(zip(predicted, outcomes, strict=True))
        made = {pair: Applied(pair[0], pair[1] == 1) for pair in set(pairs)}  # a few
        self.recent.update(zip(range(first, end), map(made.__getitem__, pairs), strict=True))
        for seq in range(first - RECENT, end - RECENT):
            self.recent.pop(seq, None)
        start = max(first, self.folded + 1)
        self.unfolded.update(
            zip(
                range(start, end),
                zip(
                    ys[start - first :],
                    predicted[start - first :],
                    outcomes[start - first :],
                    tags[start - first :],
                    strict=True,
                ),
                strict=False,
            )
        )

    def acknowledge(self, sync: Sync | Saved) -> None:
        """Note how far the shared counters are folded, as a script's reply says."""
        if sync.folded > self.folded:
            for seq in range(self.folded + 1, min(sync.folded, self.version) + 1):
                self.unfolded.pop(seq, None)
            self.folded = sync.folded
        if sync.fold_ignored:  # the next call sends again from the first unfolded
            self.fold_sent = self.folded

    def fold_payload(self, upto: int | None = None) -> bytes:
        """The outcomes to report: those not sent yet, contiguous (up to log entry
        ``upto`` at most, when given).

        The scripts of one process reach Redis in order over one connection, so what was
        sent is folded before what is sent next: a payload is made just as its call is
        sent, never before an await. When Redis ignores a payload all the same (a call
        before it failed, or a cluster's redirect sent it again later), the reply says so
        and the next call sends again from the first unfolded; outcomes still
        unacknowledged a second after being sent are sent again from there too. A
        :attr:`broken` copy reports nothing: the copy loaded in its place replays them.
        """
        if not self.unfolded or self.broken:
            return b""
        now = time.monotonic()
        again = not (self.fold_sent > self.folded and now - self.fold_sent_at < RESEND)
        if not again:
            first = self.fold_sent + 1  # only what was not sent yet
        else:  # from the first unfolded (again, if sent a while ago)
            first = self.folded + 1
            if first not in self.unfolded:
                first = min(self.unfolded)
        out = []
        end = first + FOLD_BATCH if upto is None else min(first + FOLD_BATCH, upto + 1)
        for seq in range(first, end):
            e = self.unfolded.get(seq)
            if e is None:
                break
            out.append(e)
        if not out:
            return b""
        if again:
            self.fold_sent_at = now
        self.fold_sent = first + len(out) - 1
        return orjson.dumps({"a": first, "e": out})

    def export(self) -> bytes:
        """The learner's state (JSON), as ``GET .../state`` gives it."""
        return orjson.dumps(self.learner.export_state())

    def kept_state(self) -> bytes:
        """The state a snapshot keeps: the learner's, with the challengers' and the
        monitors' if any."""
        return orjson.dumps(export_model(self.learner, self.challengers, self.monitor_states()))

    def monitor_states(self) -> dict[str, Any]:
        return {name: mon.export() for name, mon in self.monitors.items()}


@dataclass(frozen=True, slots=True)
class Start:
    """A place a model can be rebuilt from: its version, the learner's state there (None:
    a fresh learner), its input there (None: as made) and the last version it reaches."""

    version: int
    state: bytes | None
    space: dict[str, Any] | None
    until: int


@dataclass(frozen=True, slots=True)
class LogRange:
    """What :meth:`app.service.model_service.ModelService.starts` read of a model's
    snapshot and log: the snapshot's version (None: none), the log's entries and its first
    seq."""

    snapshot: int | None
    entries: int
    first: int


def _seq_of(entry_id: bytes) -> int:
    head = entry_id.split(b"-", 1)[0]
    if not head.isdigit():
        raise CorruptData(f"log entry id {entry_id!r}: expected '<seq>-0'")
    return int(head)
