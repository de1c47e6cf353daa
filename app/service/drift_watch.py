"""The drift watch: a monitor (:mod:`app.service.monitor`) of every model that feeds its
0/1 mistake stream, and each sub-expert's, to a drift detector and records an alert where
one fires.

The model's stream is whether the prediction served for each trial was wrong; a
sub-expert's is whether its top-voted label was (an expert that abstains on a trial is
not fed). Each goes to a :class:`~models.drift.PageHinkley` test at its defaults, which
fires on a rise of the error rate only (``mode="up"``): a regression, what an operator is
paged for. A falling error rate, as a model learns, raises nothing (ADWIN would fire on
it too). The detectors' documented delay is :data:`models.drift.STEP_DELAY`.

What the watch records is a function of the log: every worker replays the same trials in
the same order, so each detects the same change at the same log seq, and its state travels
in snapshots. Raising an alert once (a Redis record, a mark on the curve, a webhook) is
:mod:`app.service.alerts`'s part.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from app.service.monitor import WARM_ROWS, Kind, Monitor, top_votes
from models.core.instance import Attributes, Experts, consecutive_expert_rows
from models.core.learner import Learner
from models.core.state import InvalidState, expect_keys
from models.drift import STEP_DELAY, PageHinkley
from models.inputs.space import InputSpace
from models.kernels.watch import (
    A_STREAM,
    ALERT,
    COUNTS,
    FILLED,
    MISTAKES,
    ONES,
    POS,
    TRIALS,
    drift_run,
    drift_trial,
)

__all__ = [
    "EXPERT_WATCH",
    "FORMAT",
    "KIND",
    "MAX_ALERTS",
    "NAME",
    "RECENT",
    "DriftWatch",
    "Stream",
]

#: the watch's name among a model's monitors (it keys its state in snapshots)
NAME = "drift"

FORMAT, VERSION = "committee.drift-watch", 1
#: trials behind an alert's ``after`` rate: the detector's delay falls within them
RECENT = 256
#: alerts a model keeps, the latest
MAX_ALERTS = 64
#: a model with at most this many sub-experts watches each one's stream too (a detector
#: step per voting sub-expert per trial: bounded so a trial stays cheap)
EXPERT_WATCH = 32
DETECTOR = "page-hinkley"
_NO_SEQS = np.empty(0, np.int64)
_Votes = tuple[np.ndarray, np.ndarray, np.ndarray]
#: no sub-experts' votes (their sub-experts, classes and votes)
_NO_VOTES: _Votes = (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0))


def _rate(mistakes: int, trials: int) -> float | None:
    return mistakes / trials if trials else None


class Stream:
    """One 0/1 mistake stream: its detector, the trials and mistakes since the last
    detection (the segment) and the last :data:`RECENT` outcomes with their seqs, when
    ``seqs`` is kept. Its state is a row of a block of streams (its own, or a watch's:
    :meth:`DriftWatch._pack`) that :mod:`models.kernels.watch` steps."""

    __slots__ = ("bits", "counts", "detector", "ph", "seqs")

    def __init__(self, seqs: bool = False) -> None:
        self.detector = PageHinkley()
        self.ph = self.detector.state_[None, :].copy()
        self.detector.state_ = self.ph[0]
        self.counts = np.zeros((1, COUNTS), np.int64)
        self.bits = np.zeros((1, RECENT), np.uint8)
        self.seqs = np.zeros(RECENT, np.int64) if seqs else _NO_SEQS

    def _bind(self, ph: np.ndarray, counts: np.ndarray, bits: np.ndarray) -> None:
        """Keep the state in rows ``ph``, ``counts`` and ``bits`` (views of a block)."""
        ph[:], counts[:], bits[:] = self.ph, self.counts, self.bits
        self.ph, self.counts, self.bits = ph, counts, bits
        self.detector.state_ = ph[0]

    @property
    def trials(self) -> int:
        return int(self.counts[0, TRIALS])

    @property
    def mistakes(self) -> int:
        return int(self.counts[0, MISTAKES])

    @property
    def filled(self) -> int:
        return int(self.counts[0, FILLED])

    def _window(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The outcomes in the ring, oldest first, and their seqs when kept."""
        at = (self.counts[0, POS] - self.filled + np.arange(self.filled)) % RECENT
        return self.bits[0, at], self.seqs[at] if self.seqs.size else None

    @property
    def ring(self) -> int:
        """The outcomes in the ring as bits, the newest lowest."""
        last = self._window()[0]
        return int.from_bytes(np.packbits(last).tobytes(), "big") >> (-len(last) % 8)

    def step(self, seq: int, mistake: bool) -> dict[str, Any] | None:
        """Take one outcome; the alert when the detector fires at it."""
        out = np.empty((1, ALERT), np.int64)
        if not drift_trial(
            seq, 0, int(mistake), *_NO_VOTES, self.ph, self.counts, self.bits, self.seqs, out
        ):
            return None
        return _alert(out[0])

    def error_rate(self) -> float | None:
        """The error rate of the last :data:`RECENT` trials at most."""
        return _rate(int(self.counts[0, ONES]), self.filled)

    def export(self) -> dict[str, Any]:
        seqs = self._window()[1]
        return {
            "detector": self.detector.export_state(),
            "trials": self.trials,
            "mistakes": self.mistakes,
            "recent": f"{self.ring:x}",
            "filled": self.filled,
            "seqs": None if seqs is None else seqs.tolist(),
        }

    @classmethod
    def read(cls, doc: Any, what: str) -> Stream:
        doc = expect_keys(doc, what, {"detector", "trials", "mistakes", "recent", "filled", "seqs"})
        s = cls(seqs=doc["seqs"] is not None)
        s.detector.import_state(doc["detector"])
        s.ph[0] = s.detector.state_
        s.detector.state_ = s.ph[0]
        trials, mistakes, filled = (_count(doc, k, what) for k in ("trials", "mistakes", "filled"))
        try:
            ring = int(doc["recent"], 16)
        except (TypeError, ValueError):
            raise InvalidState(f"{what}.recent: expected a hexadecimal number") from None
        if not (mistakes <= trials and filled <= min(trials, RECENT)):
            raise InvalidState(f"{what}: mistakes, recent trials and trials do not agree")
        if not 0 <= ring < 1 << filled:
            raise InvalidState(f"{what}.recent: more bits than its {filled} trials")
        if s.seqs.size:
            seqs = doc["seqs"]
            if not isinstance(seqs, list) or len(seqs) != filled:
                raise InvalidState(f"{what}.seqs: expected a list of {filled} seqs")
            s.seqs[:filled] = [_count({"seq": q}, "seq", what) for q in seqs]
        # the ring from its first slot, the oldest outcome first
        s.bits[0, :filled] = [(ring >> (filled - 1 - k)) & 1 for k in range(filled)]
        s.counts[0] = 0
        s.counts[0, TRIALS], s.counts[0, MISTAKES], s.counts[0, FILLED] = trials, mistakes, filled
        s.counts[0, POS], s.counts[0, ONES] = filled % RECENT, ring.bit_count()
        return s


def _alert(row: np.ndarray) -> dict[str, Any]:
    """The figures of a detection, a row of the kernels' ``out``."""
    _, seq, recent, filled, mistakes, trials, since = row.tolist()
    return {
        "seq": seq,
        "before": _rate(mistakes - recent, trials - filled),
        "after": _rate(recent, filled),
        "since": None if since < 0 else since,
        "trials": trials,
    }


def _count(doc: Any, name: str, what: str) -> int:
    value = doc[name]
    if type(value) is not int or value < 0:
        raise InvalidState(f"{what}.{name}: expected an integer >= 0, got {value!r}")
    return value


class DriftWatch:
    """The drift watch of one model (see the module's notes): the model's stream, and
    with at most :data:`EXPERT_WATCH` sub-experts each one's, with the alerts raised,
    the latest :data:`MAX_ALERTS`."""

    def __init__(self, space: InputSpace, form: str) -> None:
        self.form = form
        self.model = Stream(seqs=True)
        self.experts: list[Stream] = []
        self.names: list[str] = []
        self.alerts: list[dict[str, Any]] = []
        self._pack()
        self.grown(space)

    def grown(self, space: InputSpace) -> None:
        """The model's input became ``space``: sub-experts added are watched from now
        (none once there are more than :data:`EXPERT_WATCH`)."""
        if self.form != "experts":
            return
        size = space.size("experts")
        if size > EXPERT_WATCH:
            self.experts, self.names = [], []
            self._pack()
            return
        self.names = space.describe_experts("experts")
        self.experts += [Stream() for _ in range(size - len(self.experts))]
        self._pack()

    def relearned(self, learner: Learner) -> None:
        """Nothing: the watch counts trials, whichever learner made them."""

    def _record(self, alert: dict[str, Any], what: str) -> None:
        self.alerts.append({"kind": "drift", "what": what, "detector": DETECTOR, **alert})
        del self.alerts[:-MAX_ALERTS]

    def _pack(self) -> None:
        """Put the streams' states in one block, the model's first, that one kernel call
        steps for a trial; each stream keeps its row as views."""
        streams = [self.model, *self.experts]
        m = len(streams)
        self.ph = np.empty((m, self.model.ph.shape[1]))
        self.counts = np.empty((m, COUNTS), np.int64)
        self.bits = np.empty((m, RECENT), np.uint8)
        for i, s in enumerate(streams):
            s._bind(self.ph[i : i + 1], self.counts[i : i + 1], self.bits[i : i + 1])
        for s in self.experts:
            s.seqs = _NO_SEQS
        self.out = np.empty((m * 4, ALERT), np.int64)

    def _recorded(self, out: np.ndarray, n: int) -> None:
        """Record the detections of ``out[:n]``."""
        for row in out[:n]:
            i = int(row[A_STREAM])
            self._record(_alert(row), "model" if i == 0 else self.names[i - 1])

    def judged(self, seq: int, x: Attributes | Experts, y: int, served: int, own: int) -> None:
        votes: _Votes = (x.expert, x.cls, x.value) if isinstance(x, Experts) else _NO_VOTES
        n = drift_trial(
            seq,
            y,
            int(served != y),
            *votes,
            self.ph,
            self.counts,
            self.bits,
            self.model.seqs,
            self.out,
        )
        if n:
            self._recorded(self.out, n)

    def judged_run(
        self,
        first: int,
        xs: Sequence[Attributes | Experts],
        ys: Sequence[int],
        predicted: Sequence[int],
    ) -> None:
        ys_, ps = np.asarray(ys, dtype=np.int64), np.asarray(predicted, dtype=np.int64)
        run = consecutive_expert_rows(xs) if self.experts else None
        if run is not None:
            batch = run[0].between(run[1], run[1] + len(xs))
            ptr, votes = batch.indptr, (batch.expert, batch.cls, batch.value)
        elif self.experts:  # one by one: not rows of a batch
            for seq, x, y, p in zip(range(first, first + len(ys)), xs, ys, predicted, strict=True):
                self.judged(seq, x, y, p, p)
            return
        else:
            ptr, votes = _NO_SEQS, _NO_VOTES
        at = 0
        while at < len(ys_):
            n, at = drift_run(
                first,
                at,
                ys_,
                ps,
                ptr,
                *votes,
                self.ph,
                self.counts,
                self.bits,
                self.model.seqs,
                self.out,
            )
            self._recorded(self.out, n)

    def export(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "model": self.model.export(),
            "experts": [s.export() for s in self.experts],
            "alerts": self.alerts,
        }

    @classmethod
    def read(cls, doc: Any, space: InputSpace, form: str) -> DriftWatch:
        what = "monitors.drift"
        doc = expect_keys(doc, what, {"format", "version", "model", "experts", "alerts"})
        if doc["format"] != FORMAT or doc["version"] != VERSION:
            raise InvalidState(f"{what}: expected format {FORMAT!r} version {VERSION}")
        w = cls(space, form)
        w.model = Stream.read(doc["model"], f"{what}.model")
        experts = doc["experts"]
        if not isinstance(experts, list) or len(experts) != len(w.experts):
            raise InvalidState(f"{what}.experts: expected {len(w.experts)} streams")
        w.experts = [Stream.read(e, f"{what}.experts[{i}]") for i, e in enumerate(experts)]
        w._pack()
        alerts = doc["alerts"]
        if not isinstance(alerts, list) or len(alerts) > MAX_ALERTS:
            raise InvalidState(f"{what}.alerts: expected a list of at most {MAX_ALERTS}")
        for i, a in enumerate(alerts):
            if not (isinstance(a, dict) and type(a.get("seq")) is int and "what" in a):
                raise InvalidState(f"{what}.alerts[{i}]: expected an alert")
        w.alerts = alerts
        return w

    def figures(self) -> dict[str, Any]:
        return {
            "detector": {
                "kind": DETECTOR,
                "params": self.model.detector.get_params(),
                "delay": STEP_DELAY[DETECTOR],
            },
            "error_rate": self.model.error_rate(),
            "experts": {n: s.error_rate() for n, s in zip(self.names, self.experts, strict=True)},
            "alerts": list(self.alerts),
        }


def warm() -> None:
    """Compile the kernels (or load them from numba's cache): trials of a model of
    attributes and of one of sub-experts, one by one and as runs, their votes alone or
    rows of a batch (read-only), and the state read back."""
    space = InputSpace(["a", "b"], experts={"expert_names": ["e0", "e1"]})
    rows = Experts.rows(*WARM_ROWS)
    alone = Experts([0, 1], [0, 1], [1.0, 1.0])
    w = DriftWatch(space, "experts")
    for x in (rows[0], alone):
        top_votes(x, 2)
        w.judged(1, x, 0, 1, 1)
    w.judged_run(2, rows, [0, 1], [1, 1])
    w.judged_run(4, [alone], [0], [1])
    DriftWatch.read(w.export(), space, "experts")
    plain = DriftWatch(InputSpace(["a", "b"], attributes={"n_features": 2}), "attributes")
    plain.judged_run(1, [Attributes.from_dense([1.0, 0.0])] * 2, [0, 1], [1, 1])
    Stream(seqs=True).step(1, True)


def _follows(space: InputSpace, form: str, learner: Learner) -> bool:
    return True


def _fresh(space: InputSpace, form: str, learner: Learner) -> Monitor:
    return DriftWatch(space, form)


def _read(doc: Any, space: InputSpace, form: str, learner: Learner) -> Monitor:
    return DriftWatch.read(doc, space, form)


#: every model has a drift watch
KIND = Kind(follows=_follows, fresh=_fresh, read=_read)
