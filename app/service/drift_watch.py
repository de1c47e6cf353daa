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

from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.service.monitor import Kind, Monitor, top_votes
from models.core.instance import Attributes, Experts
from models.core.learner import Learner
from models.core.state import InvalidState, expect_keys
from models.drift import STEP_DELAY, PageHinkley
from models.inputs.space import InputSpace

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
_FULL = (1 << RECENT) - 1
DETECTOR = "page-hinkley"


def _rate(mistakes: int, trials: int) -> float | None:
    return mistakes / trials if trials else None


class Stream:
    """One 0/1 mistake stream: its detector, the trials and mistakes since the last
    detection (the segment) and the last :data:`RECENT` outcomes (bits of ``ring``,
    newest lowest) with their seqs, when ``seqs`` is kept."""

    __slots__ = ("detector", "filled", "mistakes", "ring", "seqs", "trials")

    def __init__(self, seqs: bool = False) -> None:
        self.detector = PageHinkley()
        self.trials = self.mistakes = 0
        self.ring = self.filled = 0
        self.seqs: deque[int] | None = deque(maxlen=RECENT) if seqs else None

    def _restart(self) -> None:
        self.trials = self.mistakes = self.ring = self.filled = 0
        if self.seqs is not None:
            self.seqs.clear()

    def _alert(self, seq: int) -> dict[str, Any]:
        """The figures of a detection at ``seq``, the segment then restarting."""
        recent = self.ring.bit_count()
        alert = {
            "seq": seq,
            "before": _rate(self.mistakes - recent, self.trials - self.filled),
            "after": _rate(recent, self.filled),
            "since": self.seqs[0] if self.seqs else None,
            "trials": self.trials,
        }
        self._restart()
        return alert

    def step(self, seq: int, mistake: bool) -> dict[str, Any] | None:
        """Take one outcome; the alert when the detector fires at it."""
        self.trials += 1
        self.mistakes += mistake
        self.ring = ((self.ring << 1) | mistake) & _FULL
        self.filled = min(self.filled + 1, RECENT)
        if self.seqs is not None:
            self.seqs.append(seq)
        return self._alert(seq) if self.detector.update(float(mistake)) else None

    def run(self, first: int, bits: np.ndarray) -> list[dict[str, Any]]:
        """:meth:`step` of each outcome of ``bits`` (uint8), at seqs from ``first`` on,
        together; the alerts."""
        out = []
        start = 0
        for at in [*self.detector.update_many(bits).tolist(), None]:
            end = len(bits) if at is None else at + 1
            self._take(first + start, bits[start:end])
            if at is not None:
                out.append(self._alert(first + at))
            start = end
        return out

    def _take(self, first: int, bits: np.ndarray) -> None:
        n = len(bits)
        if not n:
            return
        self.trials += n
        self.mistakes += int(bits.sum())
        last = bits[-RECENT:]
        packed = int.from_bytes(np.packbits(last).tobytes(), "big") >> (-len(last) % 8)
        self.ring = ((self.ring << len(last)) | packed) & _FULL
        self.filled = min(self.filled + n, RECENT)
        if self.seqs is not None:
            self.seqs.extend(range(max(first, first + n - RECENT), first + n))

    def error_rate(self) -> float | None:
        """The error rate of the last :data:`RECENT` trials at most."""
        return _rate(self.ring.bit_count(), self.filled)

    def export(self) -> dict[str, Any]:
        return {
            "detector": self.detector.export_state(),
            "trials": self.trials,
            "mistakes": self.mistakes,
            "recent": f"{self.ring:x}",
            "filled": self.filled,
            "seqs": None if self.seqs is None else list(self.seqs),
        }

    @classmethod
    def read(cls, doc: Any, what: str) -> Stream:
        doc = expect_keys(doc, what, {"detector", "trials", "mistakes", "recent", "filled", "seqs"})
        s = cls(seqs=doc["seqs"] is not None)
        s.detector.import_state(doc["detector"])
        s.trials, s.mistakes, s.filled = (
            _count(doc, k, what) for k in ("trials", "mistakes", "filled")
        )
        try:
            s.ring = int(doc["recent"], 16)
        except (TypeError, ValueError):
            raise InvalidState(f"{what}.recent: expected a hexadecimal number") from None
        if not (s.mistakes <= s.trials and s.filled <= min(s.trials, RECENT)):
            raise InvalidState(f"{what}: mistakes, recent trials and trials do not agree")
        if not 0 <= s.ring < 1 << s.filled:
            raise InvalidState(f"{what}.recent: more bits than its {s.filled} trials")
        if s.seqs is not None:
            seqs = doc["seqs"]
            if not isinstance(seqs, list) or len(seqs) != s.filled:
                raise InvalidState(f"{what}.seqs: expected a list of {s.filled} seqs")
            s.seqs.extend(_count({"seq": q}, "seq", what) for q in seqs)
        return s


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
        self.grown(space)

    def grown(self, space: InputSpace) -> None:
        """The model's input became ``space``: sub-experts added are watched from now
        (none once there are more than :data:`EXPERT_WATCH`)."""
        if self.form != "experts":
            return
        size = space.size("experts")
        if size > EXPERT_WATCH:
            self.experts, self.names = [], []
            return
        self.names = space.describe_experts("experts")
        self.experts += [Stream() for _ in range(size - len(self.experts))]

    def relearned(self, learner: Learner) -> None:
        """Nothing: the watch counts trials, whichever learner made them."""

    def _record(self, alert: dict[str, Any], what: str) -> None:
        self.alerts.append({"kind": "drift", "what": what, "detector": DETECTOR, **alert})
        del self.alerts[:-MAX_ALERTS]

    def judged(self, seq: int, x: Attributes | Experts, y: int, served: int, own: int) -> None:
        alert = self.model.step(seq, served != y)
        if alert is not None:
            self._record(alert, "model")
        if self.experts and isinstance(x, Experts):
            voters, tops = top_votes(x, len(self.experts))
            for i, top in zip(voters.tolist(), tops.tolist(), strict=True):
                alert = self.experts[i].step(seq, top != y)
                if alert is not None:
                    self._record(alert, self.names[i])

    def judged_run(
        self,
        first: int,
        xs: Sequence[Attributes | Experts],
        ys: Sequence[int],
        predicted: Sequence[int],
    ) -> None:
        if self.experts:  # each expert's stream too, in the order one by one gives
            for seq, x, y, p in zip(range(first, first + len(ys)), xs, ys, predicted, strict=True):
                self.judged(seq, x, y, p, p)
            return
        bits = (np.asarray(predicted) != np.asarray(ys)).astype(np.uint8)
        for alert in self.model.run(first, bits):
            self._record(alert, "model")

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


def _follows(space: InputSpace, form: str, learner: Learner) -> bool:
    return True


def _fresh(space: InputSpace, form: str, learner: Learner) -> Monitor:
    return DriftWatch(space, form)


def _read(doc: Any, space: InputSpace, form: str, learner: Learner) -> Monitor:
    return DriftWatch.read(doc, space, form)


#: every model has a drift watch
KIND = Kind(follows=_follows, fresh=_fresh, read=_read)
