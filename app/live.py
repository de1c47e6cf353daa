"""A model as one worker holds it: the learner, kept in step with the model's log.

The log in Redis is the truth; the learner is a deterministic function of it. A worker
replays every entry it has not seen, in log order, whoever appended it, and so computes
each trial's outcome itself. Outcomes not yet known to be folded into the shared counters
are kept and reported with the worker's next script call (:mod:`storage.scripts`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np
import orjson

from models.base import Learner
from models.inputs import InputSpace
from models.instance import Attributes, Experts
from models.registry import build, kind_of
from models.state import InvalidState
from storage.codec import LogEntry, decode_entry
from storage.errors import CorruptData
from storage.repository import LogGap, RawEntry, Sync

__all__ = ["Applied", "LiveModel", "build_model"]

RECENT = 1 << 14  # outcomes kept for answering requests, by log seq
FOLD_BATCH = 5_000  # outcomes reported per script call at most


class Applied(NamedTuple):
    """What replaying one log entry gave: the class judged against (served or predicted
    at replay) and whether the learner updated."""

    predicted: int
    updated: bool


def build_model(config: dict[str, Any]) -> tuple[InputSpace, str, Learner]:
    """The input space, learner form and fresh learner a model config describes.

    Raises :class:`~models.params.InvalidParameter` (or InvalidInstance) for a bad config.
    """
    inp = config["input"]
    space = InputSpace(
        config["labels"], attributes=inp.get("attributes"), experts=inp.get("experts")
    )
    spec = config["learner"]
    cls = kind_of(spec)
    form = cls.input_kind_for({k: v for k, v in spec.items() if k != "kind"})
    learner = build(spec, labels=space.labels, size=space.size(form))
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
        snapshot_every: int = 10_000,
    ) -> None:
        self.name = name
        self.incarnation = incarnation
        self.config = config
        self.space, self.form, self.learner = build_model(config)
        if state is not None:
            try:
                self.learner.import_state(orjson.loads(state))
            except (InvalidState, orjson.JSONDecodeError) as e:
                raise CorruptData(f"model {name!r}: snapshot at version {version}: {e}") from None
        self.labels = self.space.labels
        self.k = len(self.labels)
        self.size = self.space.size(self.form)
        self.ttl_ms = int(config["label_ttl"] * 1000)
        self.version = version
        self.snapshot_version = version
        # larger models snapshot less often, so snapshots cost O(1) per trial amortised
        self.snapshot_every = max(snapshot_every, self.size * self.k // 16)
        self.folded = max(folded, version)
        self.unfolded: dict[int, tuple[int, int, int, str]] = {}
        self.recent: dict[int, Applied] = {}
        self.synced_at = time.monotonic()

    # -- instances --------------------------------------------------------------------

    def encode(self, payload: Any) -> Attributes | Experts:
        return self.space.encode(payload, self.form)

    def predict(self, x: Attributes | Experts) -> tuple[int, np.ndarray]:
        """The predicted class and per-label scores of the current hypothesis."""
        c = self.space.class_of(self.learner.predict(x))
        return c, np.asarray(self.learner.scores(x), dtype=np.float64)

    # -- the log ----------------------------------------------------------------------

    def apply(self, entries: Iterable[RawEntry]) -> None:
        """Replay log entries in order, skipping those already applied."""
        for entry_id, fields in entries:
            seq = _seq_of(entry_id)
            if seq <= self.version:
                continue
            if seq != self.version + 1:
                raise LogGap(f"model {self.name!r}: log entry {seq} after {self.version}")
            self._replay(decode_entry(entry_id, fields, self.size, self.k))
        self.synced_at = time.monotonic()

    def _replay(self, e: LogEntry) -> None:
        predicted, updated = self.learner.trial(e.x, self.labels[e.y])
        if e.predicted is not None:  # a label: judged against the prediction served
            predicted = e.predicted
        self.version = e.seq
        self.recent[e.seq] = Applied(predicted, updated)
        self.recent.pop(e.seq - RECENT, None)
        if e.seq > self.folded:
            self.unfolded[e.seq] = (e.y, predicted, int(updated), e.trial_id)

    def acknowledge(self, sync: Sync) -> None:
        """Note how far the shared counters are folded."""
        if sync.folded > self.folded:
            for seq in range(self.folded + 1, min(sync.folded, self.version) + 1):
                self.unfolded.pop(seq, None)
            self.folded = sync.folded

    def fold_payload(self) -> bytes:
        """The outcomes to report, from the first unfolded entry on (contiguous)."""
        if not self.unfolded:
            return b""
        first = self.folded + 1
        if first not in self.unfolded:
            first = min(self.unfolded)
        out = []
        for seq in range(first, first + FOLD_BATCH):
            e = self.unfolded.get(seq)
            if e is None:
                break
            out.append(e)
        return orjson.dumps({"a": first, "e": out})

    def export(self) -> bytes:
        return orjson.dumps(self.learner.export_state())


def _seq_of(entry_id: bytes) -> int:
    head = entry_id.split(b"-", 1)[0]
    if not head.isdigit():
        raise CorruptData(f"log entry id {entry_id!r}: expected '<seq>-0'")
    return int(head)
