"""Backtests: candidate learners replayed over a model's own log, beside the model.

A model's log holds every trial it was given, in order, and its snapshot the learner at a
version; so the model itself can be rebuilt at any version its snapshot and log reach,
and any other learner trained on the same trials. A backtest replays the log from
``from_version`` to the version it started at through the model (rebuilt there) and
through each candidate, and counts each one's mistakes on the same trials, as the model
counted its own:

* a trial learned with its label (``learn``) is judged by the prediction at replay, the
  learner's own as it meets the trial;
* a labelled prediction (``predict``, then ``label``) by the prediction made when it was
  served. For the model that is the recorded one; a candidate predicts the instance at
  the version that served it (the label entry names it), which the replay reaches before
  the label: it reads the log ahead for that. A label whose prediction was served before
  the replay began, or further back than the read-ahead, is judged at replay and counted
  ``late``.

Candidates start untrained at the earliest version the log reaches back to (at or before
``from_version``), and learn the trials before ``from_version`` without counting them. A
reset in the log (a state import or a rollback) resets the model; the candidates learn on
through it. A change of the input (experts, features, labels) is taken by every learner;
one that cannot take it stops there.

The replay runs in a thread a chunk of log at a time, the worker serving meanwhile.

Between the points where something else must happen (an early prediction due, a change
or a reset, a curve point, ``counted_from``, a run joining), each run learns the entries
as one batch: a learner with a compiled run of trials (``learn_prefix``, over sub-experts
``learn_expert_prefix``) takes them in one call, with the results of one by one; another
learner, and a trial whose update is refused, one by one. Each chunk taken is read
together first (:func:`storage.codec.read_flat`: one compiled pass into arrays and one
batch, no object per entry); a run holding an entry that pass left to the full decoder,
or one that does not decode against the input as it is there, is decoded as before.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.service.live_model import LiveModel
from models.core.instance import AttributeBatch, Attributes, ExpertBatch, Experts
from models.core.learner import UpdateRefused
from models.kernels.logentries import LABEL, LEARN, REFUSED
from storage.codec import (
    FlatEntries,
    LogEntry,
    decode_entries,
    decode_entry,
    entry_kind,
    parse_int,
    read_flat,
    served_at,
)
from storage.errors import CorruptData
from storage.repository import RawEntry

__all__ = ["LOOK_AHEAD", "Replay", "Run", "seq_of"]

LOOK_AHEAD = 8_192  # log entries read beyond the one replayed (see the module's text)

#: a share of a chunk read together: (chunk, first and end index, their rows, labels)
_Piece = tuple[FlatEntries, int, int, AttributeBatch | ExpertBatch, list[int]]


def seq_of(entry_id: bytes) -> int:
    return parse_int(entry_id.split(b"-", 1)[0], "log entry id", 1)


@dataclass(eq=False)
class Run:
    """One learner's replay: the model itself (``served``: its labelled trials judged by
    the predictions it served) or a candidate."""

    learner: dict[str, Any]
    model: LiveModel
    served: bool = False
    trials: int = 0
    mistakes: int = 0
    late: int = 0
    curve: list[tuple[int, int]] = field(default_factory=list)
    stopped: dict[str, Any] | None = None
    # label entry seq -> the class this learner predicted at the version that served it
    early: dict[int, int] = field(default_factory=dict)

    def result(self) -> dict[str, Any]:
        return {
            "learner": self.learner,
            "trials": self.trials,
            "mistakes": self.mistakes,
            "error_rate": self.mistakes / self.trials if self.trials else None,
            "late": self.late,
            "curve": self.curve,
            "stopped": self.stopped,
        }


class Replay:
    """Runs replaying one stretch of a log in step, fed a chunk of entries at a time.

    Every run sits at some version; the replay gives entry ``seq`` to each run at version
    ``seq - 1`` (so a run that starts later joins there), and counts trials after
    ``counted_from``. Curve points fall every ``every`` versions. ``batch`` False: every
    entry through every run one by one (the results are the same).
    """

    def __init__(
        self,
        runs: list[Run],
        counted_from: int,
        to: int,
        points: int,
        look_ahead: int = LOOK_AHEAD,
        batch: bool = True,
    ) -> None:
        self.runs = runs
        self.look_ahead = look_ahead
        self.batch = batch
        self.counted_from = counted_from
        self.to = to
        self.at = min(r.model.version for r in runs)  # the last entry replayed
        self.read = self.at  # the last entry taken in
        self.ahead: deque[RawEntry] = deque()
        # version -> the label entries whose prediction it served, read ahead of it
        self.due: dict[int, list[RawEntry]] = {}
        self.every = max(1, math.ceil((to - counted_from) / points))
        self.resets: list[int] = []
        self.decoded: dict[int, LogEntry | None] = {}  # entries decoded ahead, by seq
        self.flat: deque[FlatEntries] = deque()  # the chunks taken, read together

    @property
    def done(self) -> int:
        return self.at

    def take(self, entries: list[RawEntry], replies: bool = False) -> None:
        """Queue the next entries of the log, in order, from just after :attr:`read`
        (batching, also read together: see :meth:`_flat_pieces`). ``replies``: their
        field lists as the reply holds them (``read_log_fields``), not as ``read_log``
        gives them; each one not read together is taken as ``read_log`` gives it."""
        flat = read_flat(entries) if self.batch else None
        self._drop_flat(self.at + 1)
        if flat is not None and flat.first == self.read + 1:
            # in order (read_flat checks): the label entries and those it refused looked at
            look = np.flatnonzero((flat.status == LABEL) | (flat.status == REFUSED)).tolist()
            if replies:
                entries = list(entries)
                for t in look:
                    if flat.status[t] == REFUSED:
                        entries[t] = _as_read(entries[t])
            self.flat.append(flat)
            self.ahead.extend(entries)
            self.read += len(entries)
            for t in look:
                self._due(flat.first + t, entries[t])
            return
        for entry_id, fields in map(_as_read, entries) if replies else entries:
            seq = seq_of(entry_id)
            if seq != self.read + 1:
                raise CorruptData(f"log entry {seq} read after {self.read}")
            self.read = seq
            self.ahead.append((entry_id, fields))
            self._due(seq, (entry_id, fields))

    def _drop_flat(self, seq: int) -> None:
        """Let go of the chunks read together that end before entry ``seq``."""
        while self.flat and self.flat[0].first + len(self.flat[0].status) <= seq:
            self.flat.popleft()

    def _due(self, seq: int, raw: RawEntry) -> None:
        """Note label entry ``seq`` (any other is passed by) where its prediction will
        be served, when that is still to come."""
        fields = raw[1]
        if entry_kind(fields) == b"l":
            at = served_at(fields, seq)
            if at >= self.at:  # still to come: predicted there
                self.due.setdefault(at, []).append(raw)

    def advance(self, final: bool) -> int | None:
        """Replay queued entries while the read-ahead allows (all of them when ``final``:
        the log ends there). Stops before a reset the model meets and returns its seq
        (see :meth:`reset`); else None."""
        while self.ahead:
            entry_id, fields = self.ahead[0]
            seq = seq_of(entry_id)
            if not final and self.read - seq < self.look_ahead:
                return None
            for label in self.due.pop(seq - 1, ()):
                self._predict_early(label)
            kind = entry_kind(fields)
            if kind == b"r" and any(r.served and r.model.version == seq - 1 for r in self.runs):
                return seq
            if self.batch and kind not in (b"c", b"r") and self._learn_run(seq, final):
                continue
            self.ahead.popleft()
            self._apply(seq, entry_id, fields, kind)
            self.at = seq
        return None

    def reset(self, seq: int, model: LiveModel | None) -> None:
        """Pass the reset at ``seq`` that :meth:`advance` stopped before: the model is
        ``model``, rebuilt just after it (None: it cannot be, and stops there)."""
        self.ahead.popleft()
        self.resets.append(seq)
        for r in self._at(seq - 1):
            if r.served:
                if model is None:
                    r.stopped = {"version": seq, "reason": "its state after this reset is gone"}
                else:
                    r.model = model
            else:
                r.model.version = seq
        self.at = seq

    def _at(self, version: int) -> list[Run]:
        return [r for r in self.runs if r.stopped is None and r.model.version == version]

    def _predict_early(self, raw: RawEntry) -> None:
        """Each candidate's prediction of a labelled instance at the version that served
        it (where every run now is)."""
        entry_id, fields = raw
        seq = seq_of(entry_id)
        candidates = [r for r in self._at(self.at) if not r.served]
        if not candidates:
            return
        m = candidates[0].model
        e = self.decoded.get(seq)
        if e is None:
            try:
                e = self.decoded[seq] = decode_entry(entry_id, fields, m.size, m.k)
            except CorruptData:
                return  # judged at replay, where it is skipped
        x = e.x
        for r in candidates:
            try:
                r.early[seq] = r.model.space.class_of(r.model.learner.predict(x))
            except Exception:  # an instance this learner cannot read: judged at replay
                continue

    def _apply(self, seq: int, entry_id: bytes, fields: list[bytes], kind: bytes | None) -> None:
        runs = self._at(seq - 1)
        if kind == b"r":
            self.resets.append(seq)
            for r in runs:
                r.model.version = seq
        elif kind == b"c":
            for r in runs:
                change = decode_entry(entry_id, fields, r.model.size, r.model.k).change
                # a candidate takes changes of the input, not the model's challengers
                exc = r.model.take_change(seq, change, grow_only=not r.served)
                if exc is not None:
                    r.model.version = seq
                    if not r.served:  # the model skipped it alike everywhere
                        r.stopped = {"version": seq, "reason": f"cannot take the change: {exc}"}
        elif runs:
            counted = seq > self.counted_from
            if seq not in self.decoded:  # (one decoded ahead: the input only grows)
                self._decode_ahead(seq, [(entry_id, fields)], runs[0].model)
            e = self.decoded.pop(seq)  # None: skipped by every worker, and here
            for r in runs:
                r.model.version = seq
                if e is not None and e.x is not None:
                    self._trial(r, seq, e.x, e.y, e.predicted, counted)
        if seq > self.counted_from and (seq % self.every == 0 or seq == self.to):
            for r in self.runs:
                if r.stopped is None and r.model.version == seq:
                    r.curve.append((seq, r.mistakes))

    def _decode_ahead(self, seq: int, taken: list[RawEntry], model: LiveModel) -> None:
        """Decode entry ``seq`` (the first of ``taken``, entries taken off the queue) and
        those after it up to the next change or reset of the input, together (one
        compiled pass over their instances, against the input as it is there), into
        :attr:`decoded`: None for one that does not decode."""
        batch = list(taken)
        for raw in self.ahead:
            if entry_kind(raw[1]) in (b"c", b"r"):
                break
            batch.append(raw)
        for i, got in enumerate(decode_entries(batch, model.size, model.k)):
            self.decoded.setdefault(seq + i, None if isinstance(got, CorruptData) else got)

    @staticmethod
    def _trial(r: Run, seq: int, x: Any, y: int, served: int | None, counted: bool) -> None:
        m = r.model
        early = r.early.pop(seq, None)
        try:
            predicted, _ = m.learner.trial(x, m.labels[y])
        except UpdateRefused as exc:
            predicted = exc.predicted
        except Exception as exc:  # an entry this learner cannot take
            if not r.served:  # (the model skipped it alike everywhere)
                r.stopped = {"version": seq, "reason": f"cannot learn this trial: {exc}"}
            return
        if not counted:
            return
        if served is not None:  # a labelled prediction
            if r.served:
                predicted = served
            elif early is not None:
                predicted = early
            else:
                r.late += 1
        r.trials += 1
        r.mistakes += predicted != y

    # -- runs of entries learned together --------------------------------------------

    def _learn_run(self, seq: int, final: bool) -> bool:
        """Replay the queued entries from ``seq`` (at the head) up to the next point where
        something else must happen, each run taking them as one batch; False when there
        is no run at ``seq - 1`` (then :meth:`_apply` takes the entry)."""
        runs = self._at(seq - 1)
        if not runs:
            return False
        raws = self._run_from(seq, final, runs)
        end = seq + len(raws) - 1
        for _ in raws:
            self.ahead.popleft()
        counted = seq > self.counted_from
        pieces = self._flat_pieces(seq, end, runs[0].model)
        rest = runs
        if pieces is not None:
            if self.decoded:  # (decoded ahead alike: the same entries)
                for s in range(seq, end + 1):
                    self.decoded.pop(s, None)
            named: dict[int, list[Any]] = {}
            rest = [r for r in runs if not self._learn_flat(r, pieces, counted, named)]
        if rest:
            for s in range(seq, end + 1):
                if s not in self.decoded:
                    self._decode_ahead(s, raws[s - seq :], runs[0].model)
            entries = [self.decoded.pop(s) for s in range(seq, end + 1)]
            trials = [e for e in entries if e is not None and e.x is not None]
            batch = _batch([e.x for e in trials]) if trials else None  # type: ignore[misc]
            for r in rest:
                if batch is None or not self._learn_batch(r, trials, batch, counted):
                    self._one_by_one(r, entries, counted)
        for r in runs:
            if r.stopped is None:
                r.model.version = end
        self.at = end
        if end > self.counted_from and (end % self.every == 0 or end == self.to):
            for r in self.runs:
                if r.stopped is None and r.model.version == end:
                    r.curve.append((end, r.mistakes))
        return True

    def _flat_pieces(self, seq: int, end: int, model: LiveModel) -> list[_Piece] | None:
        """Entries ``seq`` to ``end`` as read together when :meth:`take` took them: the
        chunks holding them, each with the indices of its share, its rows and labels;
        None unless every one
        is a learn or label entry read there that decodes against the model's input as
        it is here (else they are decoded one by one, which says what is wrong)."""
        self._drop_flat(seq)
        pieces = []
        s = seq
        for flat in self.flat:
            if s > end:
                break
            a = s - flat.first
            if a < 0:
                return None
            z = min(end + 1 - flat.first, len(flat.status))
            if not flat.fits(a, z, model.size, model.k):
                return None
            rows = flat.row
            batch = flat.batch.between(int(rows[a]), int(rows[z - 1]) + 1)
            pieces.append((flat, a, z, batch, flat.y[a:z].tolist()))
            s = flat.first + z
        return pieces if s > end else None

    def _learn_flat(
        self, r: Run, pieces: list[_Piece], counted: bool, named: dict[int, list[Any]]
    ) -> bool:
        """Learn the entries of ``pieces`` (:meth:`_flat_pieces`) by the run's compiled
        run of trials and count them as :meth:`_trial` does; False, with nothing learned,
        where the learner has none or the first trial does not fit it (then as decoded
        one by one). ``named`` keeps, by piece, its labels named as the previous run's
        learner names them."""
        m = r.model
        expert = isinstance(pieces[0][0].batch, ExpertBatch)
        learn_prefix = getattr(m.learner, "learn_expert_prefix" if expert else "learn_prefix", None)
        if learn_prefix is None:
            return False
        labels = m.labels
        first = True
        for i, (flat, a, z, batch, ys) in enumerate(pieces):
            kept = named.get(i)
            if kept is None or kept[0] != labels:
                kept = named[i] = [labels, list(map(labels.__getitem__, ys))]
            at, n = 0, z - a
            while at < n:
                part = batch if at == 0 else batch.between(at, n)
                try:
                    mistakes, _, done = learn_prefix(part, kept[1][at:] if at else kept[1])
                except Exception:  # an instance or label it does not take: one by one
                    if first:
                        return False
                    mistakes, done = np.zeros(0, dtype=bool), 0
                first = False
                self._count_flat(r, flat, a + at, mistakes[:done], counted)
                at += done
                if at < n:  # a refused update, or what it could not take
                    t = a + at
                    seq = flat.first + t
                    m.version = seq
                    p = int(flat.predicted[t])
                    x = _row(batch, at)
                    self._trial(r, seq, x, ys[at], None if p < 0 else p, counted)
                    if r.stopped is not None:
                        return True
                    at += 1
        return True

    @staticmethod
    def _count_flat(r: Run, flat: FlatEntries, a: int, own: np.ndarray, counted: bool) -> None:
        """:meth:`_count` of the entries from index ``a`` of ``flat`` on, learned
        together, the learner's own mistakes ``own``."""
        z = a + own.size
        mistakes = int(np.count_nonzero(own))
        predicted = flat.predicted[a:z]
        for i in np.flatnonzero(predicted >= 0).tolist():  # labelled predictions
            seq = flat.first + a + i
            early = r.early.pop(seq, None)
            if not counted:
                continue
            y = int(flat.y[a + i])
            mistakes -= bool(own[i])  # judged by another prediction
            if r.served:
                mistakes += int(predicted[i]) != y
            elif early is not None:
                mistakes += early != y
            else:
                r.late += 1
                mistakes += bool(own[i])
        if counted:
            r.trials += int(own.size)
            r.mistakes += mistakes

    def _run_from(self, seq: int, final: bool, runs: list[Run]) -> list[RawEntry]:
        """The queued entries from ``seq`` to the last before the next point where
        something else must happen: a change or a reset, an early prediction due, a curve
        point, ``counted_from``, a run joining, the read-ahead's end (each such entry,
        after which that happens, included)."""
        stop = self.read - (0 if final else self.look_ahead)
        joining = {r.model.version for r in self.runs if r.stopped is None} - {seq - 1}
        points = [s for s in (*self.due, *joining) if s >= seq]
        if self.counted_from >= seq:
            points.append(self.counted_from)
        else:  # the next curve point
            points.append(seq + (-seq) % self.every)
            if self.to >= seq:
                points.append(self.to)
        stop = min(stop, *points)
        out = list(itertools.islice(self.ahead, max(0, stop - seq + 1)))
        # up to a change or a reset (its entry excluded)
        n = self._flat_learned(seq, len(out))
        for t in range(n, len(out)):
            if entry_kind(out[t][1]) in (b"c", b"r"):
                return out[:t]
        return out

    def _flat_learned(self, seq: int, n: int) -> int:
        """How many of the ``n`` entries from ``seq`` on are, from the first on, learn or
        label entries as read together (see :meth:`_flat_pieces`)."""
        s, end = seq, seq + n
        for flat in self.flat:
            if s >= end:
                break
            a = s - flat.first
            if a < 0 or a >= len(flat.status):
                continue
            z = min(end - flat.first, len(flat.status))
            status = flat.status[a:z]
            other = np.flatnonzero((status != LEARN) & (status != LABEL))
            if other.size:
                return s + int(other[0]) - seq
            s = flat.first + z
        return s - seq

    @staticmethod
    def _one_by_one(r: Run, entries: list[LogEntry | None], counted: bool) -> None:
        for e in entries:
            if e is None or r.stopped is not None:
                continue
            r.model.version = e.seq
            if e.x is not None:
                Replay._trial(r, e.seq, e.x, e.y, e.predicted, counted)
        # (a skipped entry at the end: every run's version moves past it alike)

    @staticmethod
    def _learn_batch(
        r: Run, trials: list[LogEntry], batch: AttributeBatch | ExpertBatch, counted: bool
    ) -> bool:
        """Learn ``trials`` (``batch`` their instances) by the run's compiled run of
        trials and count them as :meth:`_trial` does; False, with nothing learned, where
        the learner has none or the batch does not fit it (then one by one)."""
        m = r.model
        name = "learn_prefix" if isinstance(batch, AttributeBatch) else "learn_expert_prefix"
        learn_prefix = getattr(m.learner, name, None)
        if learn_prefix is None:
            return False
        labels = [m.labels[e.y] for e in trials]
        at = 0
        while at < len(trials):
            part = batch if at == 0 else batch.between(at, len(trials))
            try:
                mistakes, _, done = learn_prefix(part, labels[at:])
            except Exception:  # an instance or label it does not take: one by one
                if at == 0:
                    return False
                mistakes, done = np.zeros(0, dtype=bool), 0
            Replay._count(r, trials[at : at + done], mistakes[:done], counted)
            at += done
            if at < len(trials):  # a refused update, or what it could not take
                e = trials[at]
                m.version = e.seq
                Replay._trial(r, e.seq, e.x, e.y, e.predicted, counted)
                if r.stopped is not None:
                    return True
                at += 1
        return True

    @staticmethod
    def _count(r: Run, trials: list[LogEntry], own: np.ndarray, counted: bool) -> None:
        """Count ``trials`` learned together, the learner's own mistakes ``own``, as
        :meth:`_trial` counts each."""
        mistakes = int(np.count_nonzero(own))
        for i, e in enumerate(trials):
            if e.predicted is None:
                continue
            early = r.early.pop(e.seq, None)
            if not counted:
                continue
            mistakes -= bool(own[i])  # judged by another prediction
            if r.served:
                mistakes += e.predicted != e.y
            elif early is not None:
                mistakes += early != e.y
            else:
                r.late += 1
                mistakes += bool(own[i])
        if counted:
            r.trials += len(trials)
            r.mistakes += mistakes


def _as_read(raw: RawEntry) -> RawEntry:
    """An entry as ``read_log`` gives it: its fields made a dict (the last of a name
    kept, an odd one out dropped), listed flat."""
    it = iter(raw[1])
    return raw[0], [v for kv in dict(zip(it, it, strict=False)).items() for v in kv]


def _row(batch: AttributeBatch | ExpertBatch, t: int) -> Attributes | Experts:
    """Row ``t`` of ``batch`` as an instance."""
    if isinstance(batch, AttributeBatch):
        return batch[t]
    a, z = int(batch.indptr[t]), int(batch.indptr[t + 1])
    return Experts(batch.expert[a:z], batch.cls[a:z], batch.value[a:z])


def _batch(xs: list[Attributes | Experts]) -> AttributeBatch | ExpertBatch | None:
    """The instances ``xs`` as one batch of their form (None: of mixed forms)."""
    if all(type(x) is Experts for x in xs):
        return ExpertBatch.from_instances(xs)  # type: ignore[arg-type]
    if all(type(x) is Attributes for x in xs):
        return AttributeBatch.from_instances(xs)
    return None
