"""What the model store reads and writes, as plain records, and the checks that turn
Redis's replies into them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from storage.codec import parse_int
from storage.errors import CorruptData
from storage.scripts import MARKS

__all__ = [
    "COUNTERS",
    "Created",
    "Idempotency",
    "LabelResult",
    "LearnGroup",
    "LearnResult",
    "PredictResult",
    "RawEntry",
    "Saved",
    "Snapshot",
    "Statistics",
    "StoredModel",
    "Sync",
    "as_int",
    "input_of",
    "parse_meta",
    "read_space",
    "text",
    "with_space",
]

RawEntry = tuple[bytes, list[bytes]]


@dataclass(frozen=True, slots=True)
class Sync:
    """The model's log as a script saw it: its version, how far outcomes are folded,
    and the entries after the caller's known version (at most the limit asked for).
    ``stamp`` marks the entries the call appended (see :func:`storage.store.calls.new_stamp`).
    ``fold_ignored``: the outcomes the call sent were not folded, those before them not
    being folded yet (the call that sent those failed, or reached Redis after this one)."""

    version: int
    folded: int
    entries: list[RawEntry]
    stamp: str = ""
    fold_ignored: bool = False


@dataclass(frozen=True, slots=True)
class Saved:
    """What a snapshot's script answered: whether the snapshot stands (the state kept,
    or a newer one kept already; False: outcomes up to its version are not folded yet),
    how far outcomes are folded, and whether those the call sent were ignored (as
    :attr:`Sync.fold_ignored`)."""

    kept: bool
    folded: int
    fold_ignored: bool


@dataclass(frozen=True, slots=True)
class Idempotency:
    """An ``Idempotency-Key`` and a hash of the request it came with."""

    key: str
    digest: str


@dataclass(frozen=True, slots=True)
class LearnGroup:
    """Learn items sent as one request; ``idem`` makes their appending happen once."""

    items: Sequence[tuple[bytes, int]]
    idem: Idempotency | None = None


@dataclass(frozen=True, slots=True)
class LearnResult:
    status: str  # ok | repeat | mismatch
    first: int = -1  # the first item's log seq
    count: int = 0  # items the first request appended (repeat)
    incarnation: str = ""  # the incarnation the first request appended to (repeat)
    answer: bytes = b""  # the first request's answer, once kept (repeat)


@dataclass(frozen=True, slots=True)
class Created:
    """What a create did: its time, and whether it repeats an earlier request."""

    created: int
    incarnation: str
    repeat: bool


@dataclass(frozen=True, slots=True)
class PredictResult:
    status: str  # ok | existing | conflict | full | invalid
    predicted: int = -1
    scores: bytes = b""
    version: int = -1


@dataclass(frozen=True, slots=True)
class LabelResult:
    status: str  # ok | repeat | conflict | expired | unknown | invalid
    predicted: int = -1
    seq: int = -1
    updated: int = -1  # -1: not folded yet
    label: int = -1  # the other label, for a conflict
    instance: bytes = b""  # applied: the trial's instance as the log entry keeps it


@dataclass(slots=True)
class StoredModel:
    name: str
    incarnation: str
    config: dict[str, Any]
    created: int
    version: int
    folded: int
    counters: dict[str, int] = field(default_factory=dict)
    confusion: dict[tuple[int, int], int] = field(default_factory=dict)
    #: the model's input (labels and sections) since its last change; None: as made
    space: dict[str, Any] | None = None
    #: its latest changes and state imports: (the entry's seq, what it did)
    marks: list[tuple[int, str]] = field(default_factory=list)
    #: state imports and rollbacks so far (reset entries in its log)
    imports: int = 0

    @property
    def current(self) -> dict[str, Any]:
        """The config with the input the model has now."""
        return with_space(self.config, self.space)


class Snapshot(NamedTuple):
    """A model's kept state: its version, the learner's state document (JSON), the stamp
    of the log entry at that version and the input it has there (None: as made)."""

    version: int
    state: bytes
    stamp: str
    space: dict[str, Any] | None


@dataclass(slots=True)
class Statistics:
    """What a dashboard polls, read without any learner state."""

    model: StoredModel
    pending: int
    overdue: int  # past the deadline, not yet swept into ``expired``
    curve: list[tuple[int, int]]
    window: tuple[int, int]  # trials and mistakes among the last (up to) 1,000 folded
    summary_version: int
    summary: dict[str, Any] | None


# the members of a stored input that are not input sections: the labels, the learner a
# promoted challenger made the model's, the names of the model's challengers
MODEL_MEMBERS = frozenset({"labels", "learner", "challengers"})


def with_space(config: dict[str, Any], space: dict[str, Any] | None) -> dict[str, Any]:
    """``config`` with its labels and input sections replaced by ``space``'s (an input
    space's config), when given, and its learner by the one ``space`` names (a promoted
    challenger's). ``space`` may also name the model's challengers, which are not part
    of the config."""
    if space is None:
        return config
    sections = {k: v for k, v in space.items() if k not in MODEL_MEMBERS}
    out = {**config, "labels": space["labels"], "input": sections}
    if "learner" in space:
        out["learner"] = space["learner"]
    return out


def input_of(space: dict[str, Any] | None) -> dict[str, Any] | None:
    """``space`` without the learner and challengers it may name: the input alone."""
    if space is None:
        return None
    return {k: v for k, v in space.items() if k not in ("learner", "challengers")}


def read_space(raw: Any, what: str) -> dict[str, Any] | None:
    """A stored input (JSON of an object with labels), or None for none ('' or absent)."""
    if raw is None or raw == b"":
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise CorruptData(f"{what}: not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("labels"), list):
        raise CorruptData(f"{what}: expected an object with labels")
    if not isinstance(doc.get("learner", {}), dict):
        raise CorruptData(f"{what}: its learner must be an object")
    names = doc.get("challengers", [])
    if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise CorruptData(f"{what}: its challengers must be a list of names")
    return doc


def text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def as_int(v: Any, what: str) -> int:
    """An integer reply, or an integer Redis keeps as text (checked)."""
    if isinstance(v, int):
        return v
    return parse_int(v, what)


# the counters a model's meta keeps
COUNTERS = (
    "predictions",
    "labelled",
    "learned",
    "mistakes",
    "updates",
    "expired",
    "late_labels",
    "quarantined",
    "refused",
)


def parse_meta(name: str, raw: dict[Any, Any]) -> StoredModel:
    """A model's meta hash (HGETALL) as a :class:`StoredModel`, checked."""
    meta = {text(k): v for k, v in raw.items()}
    try:
        config = orjson.loads(meta["config"])
        incarnation = text(meta["incarnation"])
    except (KeyError, orjson.JSONDecodeError) as e:
        raise CorruptData(f"model {name!r}: meta lacks a valid config: {e}") from None
    if not isinstance(config, dict):
        raise CorruptData(f"model {name!r}: config is not an object")
    out = StoredModel(
        name=name,
        incarnation=incarnation,
        config=config,
        created=as_int(meta.get("created", b"0"), "created"),
        version=as_int(meta.get("version", b"0"), "version"),
        folded=as_int(meta.get("folded", b"0"), "folded"),
        space=read_space(meta.get("input"), f"model {name!r}: its input"),
        marks=_marks(meta.get("marks"), name),
        imports=as_int(meta.get("imports", b"0"), "imports"),
    )
    for c in COUNTERS:
        out.counters[c] = as_int(meta.get(c, b"0"), c)
    for key, v in meta.items():
        if key.startswith("c:"):
            parts = key.split(":")
            if len(parts) != 3:
                raise CorruptData(f"model {name!r}: counter {key!r}")
            out.confusion[as_int(parts[1], key), as_int(parts[2], key)] = as_int(v, key)
    return out


def _marks(raw: Any, name: str) -> list[tuple[int, str]]:
    """A model's marks as its meta keeps them (see ``storage/lua/prelude/once.lua``)."""
    if raw is None:
        return []
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise CorruptData(f"model {name!r}: its marks are not JSON") from None
    if doc == {}:  # cjson writes an empty list as an empty object
        return []
    if not isinstance(doc, list) or len(doc) > MARKS:
        raise CorruptData(f"model {name!r}: its marks are not a list of at most {MARKS}")
    out = []
    for m in doc:
        if not (
            isinstance(m, list)
            and len(m) == 2
            and type(m[0]) is int
            and m[0] > 0
            and isinstance(m[1], str)
            and len(m[1]) <= 200
        ):
            raise CorruptData(f"model {name!r}: a mark is not [seq, text]: {str(m)[:80]}")
        out.append((m[0], m[1]))
    return out
