"""What ``GET /v1/models/{name}/events`` pushes: a model's progress, changes, alerts and
challengers' figures, each tied to the log position it reflects.

A :class:`Feed` follows one model for one connection. Each :meth:`Feed.step` reads the
model's statistics once; their version ``P`` is the position of that step. It gives,
in log order, every change entry (a change of the input, a challenger attached,
promoted or retired, a reset: a state import or a rollback) and every drift or bound alert after
the position the last step reached, up to ``P``; then its challengers' figures (when
they differ from those this feed last gave) and its progress (its statistics document,
likewise). Each event's id is the log position it reflects: a
change's or an alert's own seq, ``P`` for the challengers and the progress (last). A feed
started after position ``L`` (a client's ``Last-Event-ID``) thus gives exactly what
came after ``L``: nothing it already had, and no change or alert left out, whenever a
connection broke.

Changes are found from the model's marks (:data:`storage.scripts.MARKS`, the latest 64
changes, resets and alerts) and read from their log entries; alerts from the model's
drift and bound watches (the latest 64 of each), which every
worker computes alike from the log. A client away for more than 64 changes (or alerts)
gets the latest 64. Progress and challengers are states, coalesced: a feed gives the
latest once per step however many trials came between, so a slow reader costs no
memory: what it has not read yet is replaced, never queued.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from app.core.errors import BadInput
from app.service.bound_watch import NAME as BOUND_WATCH
from app.service.bound_watch import BoundWatch
from app.service.drift_watch import NAME as DRIFT_WATCH
from app.service.drift_watch import DriftWatch
from app.service.model_service import ModelService
from storage.codec import entry_kind
from storage.errors import ModelNotFound

__all__ = ["MAX_POSITION", "Event", "Feed", "position_of"]

#: the largest log position (a Redis stream id's first part, as the log's versions go)
MAX_POSITION = 2**62
_DIGITS = len(str(MAX_POSITION))

#: reads model ``name``'s statistics: (its version, its incarnation, its marks, the
#: statistics document as JSON)
Progress = Callable[[str], Awaitable[tuple[int, str, list[tuple[int, str]], bytes]]]


@dataclass(frozen=True, slots=True)
class Event:
    """One server-sent event: its type, its id (a log position; None: none) and its data
    (one JSON document)."""

    kind: str
    id: int | None
    data: bytes


def position_of(text: str, field: str, where: str) -> int:
    """A position as a client gives it (decimal digits, at most :data:`MAX_POSITION`);
    :class:`BadInput` naming ``field`` otherwise."""
    if not (0 < len(text) <= _DIGITS and text.isascii() and text.isdigit()):
        raise BadInput(field, f"{text[:40]!r}: expected a log position, 0 to {MAX_POSITION}", where)
    value = int(text)
    if value > MAX_POSITION:
        raise BadInput(field, f"{value}: expected at most {MAX_POSITION}", where)
    return value


class Feed:
    """The events of model ``name`` for one connection (see the module's notes).
    ``progress`` reads the model's statistics document."""

    def __init__(self, service: ModelService, name: str, progress: Progress) -> None:
        self.service, self.name, self.progress = service, name, progress
        self.after = 0  # the position the events given so far reach
        self.incarnation = ""
        self._progress: bytes | None = None  # the documents given last
        self._challengers: bytes | None = None
        self._quiet = False  # the first challengers' figures read are the client's already

    async def start(self, after: int | None, field: str, where: str) -> None:
        """Begin after position ``after`` (None: now, with the model's progress and
        challengers as they are). :class:`BadInput` naming ``field`` for a position
        beyond the model's version; :class:`ModelNotFound` for no model."""
        version, self.incarnation, _, doc = await self.progress(self.name)
        if after is None:
            self.after = version
            return
        if after > version:
            raise BadInput(
                field, f"{after}: beyond the model's log, which ends at {version}", where
            )
        self.after = after
        if after == version:  # the client has all there is up to now
            self._progress, self._quiet = doc, True

    async def step(self) -> list[Event] | None:
        """The events since the last step, in log order; None when the model is gone
        (deleted, or deleted and made again: its positions start over)."""
        try:
            version, incarnation, marks, doc = await self.progress(self.name)
        except ModelNotFound:
            return None
        if incarnation != self.incarnation:
            return None
        out: list[Event] = []
        fresh = self._challengers is None or version > self.after
        alerts: list[dict[str, Any]] = []
        challengers: dict[str, Any] | None = None
        if fresh:
            try:
                m = await self.service.replicas.fresh(self.name)  # at or after ``version``
            except ModelNotFound:
                return None
            if m.incarnation != self.incarnation:
                return None
            for watch in (m.monitors.get(DRIFT_WATCH), m.monitors.get(BOUND_WATCH)):
                if isinstance(watch, (DriftWatch, BoundWatch)):
                    alerts += [a for a in watch.alerts if self.after < a["seq"] <= version]
            challengers = {
                "model": self.name,
                "version": m.version,
                "learner": m.config["learner"],
                "challengers": [c.figures() for c in m.challengers.values()],
            }
        alerted = {a["seq"] for a in alerts}
        for seq, what in marks:
            if not self.after < seq <= version:
                continue
            change = await self._change(seq, what, alerted)
            if change is not None:
                out.append(Event("change", seq, orjson.dumps(change)))
        for a in alerts:
            out.append(Event("alert", a["seq"], orjson.dumps({"version": a["seq"], **a})))
        out.sort(key=lambda e: e.id or 0)  # log order (stable: a change before an alert)
        self.after = version
        if challengers is not None:
            text = orjson.dumps(challengers)
            # the first time only when there are some: a model without any says nothing
            first = self._challengers is None and (self._quiet or not challengers["challengers"])
            if text != self._challengers and not first:
                out.append(Event("challengers", version, text))
            self._challengers = text
        if doc != self._progress:  # last: a step's progress says the client is caught up
            self._progress = doc
            out.append(Event("progress", version, doc))
        return out

    async def _change(self, seq: int, what: str, alerted: set[int]) -> dict[str, Any] | None:
        """The change event of the mark at ``seq``; None for an alert's mark (an alert
        marks the trial it fired at)."""
        entries = await self.service.store.read_log(self.name, seq - 1, 1, upto=seq)
        fields = entries[0][1] if entries and entries[0][0].startswith(b"%d-" % seq) else None
        doc: dict[str, Any] = {"version": seq, "what": what}
        if fields is None:  # no longer in the log (a snapshot took its place)
            if seq in alerted or what.startswith(("drift ", "bound: ")):
                return None
            return {**doc, "kind": "change"}
        kind = entry_kind(fields)
        if kind == b"r":
            return {**doc, "kind": "reset"}
        if kind != b"c":  # a trial: an alert's mark
            return None
        raw = next((fields[i + 1] for i in range(0, len(fields) - 1, 2) if fields[i] == b"c"), b"")
        try:
            change = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return {**doc, "kind": "change"}
        if isinstance(change, dict) and "challenger" in change:
            return {**doc, "kind": "challenger", "challenger": change["challenger"]}
        return {**doc, "kind": "change", "change": change}
