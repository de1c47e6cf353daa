"""Many payloads encoded at once: the common forms of a batch of trials.

:meth:`~models.inputs.space.InputSpace.encode_each` hands :func:`sparse_attributes` the
``features`` objects ``{"<index>": value}`` of a batch. Their keys and values are checked
and converted together, in a few numpy passes over the whole batch, and each row gets the
:class:`~models.core.instance.Attributes` that :meth:`~models.inputs.space.InputSpace.encode` would
give it, array for array. A row that is not plainly well formed (a key that is not a
string of digits, an index out of range or given twice, a value that is not a finite
int or float) is left to :meth:`~models.inputs.space.InputSpace.encode`, which reports its
exact error.

Fusion payloads get the same treatment from :func:`expert_votes`: the ``experts``
objects of a batch, every vote of one plain form (a label, a list of k scores, or a
``{label: score}`` object), read into one score matrix with a row per vote, by C-level
iteration and numpy, with no Python step per vote or per score. What is not plainly well
formed is left to :meth:`~models.inputs.space.InputSpace.encode`.

An ``experts`` object may also come as its JSON text, unparsed (:class:`RawExperts`):
:func:`raw_expert_votes` reads the votes of such objects straight from their text, in one
compiled pass (:func:`models.kernels.jsontext.read_votes`), to the same score matrix; what
that pass refuses is parsed (:meth:`RawExperts.document`) and read as above. So may a
``features`` object (:class:`RawFeatures`): :func:`raw_sparse_attributes` reads
``{"<index>": value}`` objects from their text (:func:`models.kernels.jsontext.read_features`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from models.core.instance import Attributes, Experts
from models.kernels.instances import digit_keys, sparse_rows
from models.kernels.jsontext import (
    read_feature_row,
    read_features,
    read_vote_row,
    read_vote_rows,
    read_votes,
)

__all__ = [
    "RawExperts",
    "RawFeatures",
    "RawPayload",
    "Votes",
    "dense_attributes",
    "expert_votes",
    "raw_expert_votes",
    "raw_sparse_attribute",
    "raw_sparse_attributes",
    "raw_vote_row",
    "raw_vote_rows",
    "sparse_attributes",
]

_NUMBER_TYPES = frozenset({float, int})


def sparse_attributes(
    rows: Sequence[dict[Any, Any]],
    d: int,
    constant: bool,
    names: Mapping[str, int] | None = None,
    combine: bool = False,
) -> list[Attributes | None]:
    """Each row's attributes over features ``0..d-1`` (then the constant at ``d`` if
    ``constant``), or None for a row :meth:`InputSpace.encode` must look at itself. The
    keys are indices as strings of digits, or with ``names`` feature names; ``combine``:
    names that share an index in a row add up (hashed names), as encode adds them."""

    def take(part: Sequence[dict[Any, Any]]) -> list[Attributes] | None:
        return _take(part, d, constant, names, combine)

    return _each(rows, take)


def dense_attributes(rows: Sequence[list[Any]], d: int, constant: bool) -> list[Attributes | None]:
    """Each row's attributes from its list of all ``d`` values (then the constant at
    ``d`` if ``constant``), as :meth:`~models.core.instance.Attributes.from_dense` gives
    them, or None for a row :meth:`InputSpace.encode` must look at itself."""

    def take(part: Sequence[list[Any]]) -> list[Attributes] | None:
        n = len(part)
        if set(map(len, part)) != {d}:
            return None
        val = _values(list(itertools.chain.from_iterable(part)))
        if val is None:
            return None
        counts = np.full(n, d, dtype=np.int64)
        # every index once per row: distinct, so the pass cannot refuse them
        _, idx, val, ptr, _, low, high = sparse_rows(
            counts, np.tile(np.arange(d, dtype=np.int64), n), val, d, constant
        )
        size = np.full(n, d + constant, dtype=np.int64)  # every value is given
        return Attributes.rows(idx, val, ptr, size, low, high)

    return _each(rows, take)


R = Any  # a row of a batch


def _each(
    rows: Sequence[R], take: Callable[[Sequence[R]], list[Attributes] | None]
) -> list[Attributes | None]:
    """What ``take`` gives the rows together, or when some row is off, the others'."""
    if not rows:
        return []
    whole = take(rows)
    if whole is not None:
        return list(whole)
    out: list[Attributes | None] = [None] * len(rows)
    if len(rows) > 1:  # some row is off: find which, and take the others together
        good = [t for t, row in enumerate(rows) if take([row]) is not None]
        taken = take([rows[t] for t in good]) if good else None
        for t, x in zip(good, taken or (), strict=False):
            out[t] = x
    return out


def _named(keys: list[Any], names: Mapping[str, int]) -> np.ndarray | None:
    """The keys, each a feature name, as their int64 indices; else None."""
    idx = np.fromiter(map(names.get, keys, itertools.repeat(-1)), dtype=np.int64, count=len(keys))
    return idx if int(idx.min()) >= 0 else None


def _indices(keys: list[Any], d: int) -> np.ndarray | None:
    """The keys, strings of 1 to 18 ASCII digits, as int64 indices below ``d``; else None."""
    try:
        chars = np.frombuffer(",".join(keys).encode("ascii"), dtype=np.uint8)
    except (TypeError, UnicodeEncodeError):
        return None
    ok, idx = digit_keys(chars, len(keys), d)
    return idx if ok else None


def _values(vals: list[Any]) -> np.ndarray | None:
    """The values, all ints or floats, as finite float64 values; else None."""
    if not set(map(type, vals)) <= _NUMBER_TYPES:
        return None
    try:
        val = np.array(vals, dtype=np.float64)
    except OverflowError:
        return None
    return val if np.isfinite(val).all() else None


def _take(
    rows: Sequence[dict[Any, Any]],
    d: int,
    constant: bool,
    names: Mapping[str, int] | None,
    combine: bool = False,
) -> list[Attributes] | None:
    """Every row's attributes, or None if any row is not plainly well formed."""
    n = len(rows)
    counts = np.fromiter(map(len, rows), dtype=np.int64, count=n)
    keys = list(itertools.chain.from_iterable(rows))
    if keys:
        idx = _indices(keys, d) if names is None else _named(keys, names)
        val = _values(list(itertools.chain.from_iterable(map(dict.values, rows))))
        if idx is None or val is None:
            return None
    else:
        idx, val = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    distinct, *kept = sparse_rows(counts, idx, val, d, constant)
    if distinct:
        return Attributes.rows(*kept)
    if not combine:  # an index twice in a row
        return None
    # names hashed to one index: their values add up as encode adds them (numpy's sum
    # of each run, whose order of additions the compiled pass would not repeat)
    row = np.repeat(np.arange(n), counts)
    # sorted by index within each row, stable: the values of one index in payload order
    order = np.argsort(row * d + idx, kind="stable") if n * d < 2**62 else np.lexsort((idx, row))
    idx, val = idx[order], val[order]
    repeated = (idx[1:] == idx[:-1]) & (row[1:] == row[:-1])
    first = np.flatnonzero(np.concatenate(([True], ~repeated)))
    with np.errstate(over="ignore"):
        val = np.add.reduceat(val, first)
    if not np.isfinite(val).all():  # encode names the sum at fault
        return None
    idx, row = idx[first], row[first]  # row is in order: sorting kept its blocks
    counts = np.bincount(row, minlength=n)
    if constant:  # index d, value 1, at the end of every row
        ends = np.cumsum(counts)
        idx, val = np.insert(idx, ends, d), np.insert(val, ends, 1.0)
        row = np.repeat(np.arange(n), counts + 1)
    nonzero = val != 0.0
    if not nonzero.all():
        idx, val, row = idx[nonzero], val[nonzero], row[nonzero]
    return _rows(n, row, idx, val)


def _rows(n: int, row: np.ndarray, idx: np.ndarray, val: np.ndarray) -> list[Attributes]:
    """One :class:`Attributes` per row of sorted, distinct, non-zero CSR arrays, each
    viewing the shared read-only arrays, with its extent and value range worked out at
    once."""
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=n), out=ptr[1:])
    filled = ptr[1:] > ptr[:-1]
    size = np.zeros(n, dtype=np.int64)
    low, high = np.zeros(n), np.zeros(n)
    if val.size:
        starts = ptr[:-1][filled]
        size[filled] = idx[ptr[1:][filled] - 1] + 1
        low[filled] = np.minimum.reduceat(val, starts)
        high[filled] = np.maximum.reduceat(val, starts)
    return Attributes.rows(idx, val, ptr, size, low, high)


# -- expert votes ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Votes:
    """The votes of a batch: vote ``i`` is expert ``expert[i]``'s scores ``scores[i]`` in
    payload ``row[i]``, in each payload's order."""

    expert: np.ndarray  # int64
    row: np.ndarray  # int64, non-decreasing
    scores: np.ndarray  # votes x k, finite


_LABEL_TYPES = frozenset({str, int})


def expert_votes(
    votes: Sequence[dict[Any, Any]],
    expert_index: Mapping[str, int],
    classes: Mapping[Any, int],
    keys_in_order: tuple[str, ...] | None,
    k: int,
) -> Votes | None:
    """The votes of the ``experts`` objects ``votes`` (dicts), each vote known and of the
    one form all share, as :func:`~models.inputs.payload.read_votes` reads them; None when
    they are not all plainly so (the caller reads them one by one, which names the fault).

    ``classes`` maps exact str and int labels to their class; ``keys_in_order`` are the
    labels as JSON object keys in class order (None: some label has no such key)."""
    n = len(votes)
    counts = np.fromiter(map(len, votes), dtype=np.int64, count=n)
    names = list(itertools.chain.from_iterable(votes))
    expert = np.fromiter(
        map(expert_index.get, names, itertools.repeat(-1)), dtype=np.int64, count=len(names)
    )
    if expert.size and int(expert.min()) < 0:  # an unknown (or retired) expert
        return None
    values = list(itertools.chain.from_iterable(map(dict.values, votes)))
    row = np.repeat(np.arange(n, dtype=np.int64), counts)
    kinds = set(map(type, values))
    if not values:
        scores: np.ndarray | None = np.zeros((0, k))
    elif kinds == {dict}:
        scores = _mapped(values, classes, keys_in_order, k)
    elif kinds == {list}:
        scores = _listed(values, k)
    elif kinds <= _LABEL_TYPES:
        scores = _labelled(values, classes, k)
    else:  # mixed forms, or none to skip: one by one
        return None
    if scores is None:
        return None
    return Votes(expert, row, scores)


def _numbers(flat: list[Any]) -> np.ndarray | None:
    """``flat``, all ints or floats, as finite float64 values; else None."""
    if not set(map(type, flat)) <= _NUMBER_TYPES:
        return None
    try:
        arr = np.array(flat, dtype=np.float64)
    except OverflowError:
        return None
    return arr if np.isfinite(arr).all() else None


def _listed(values: list[list[Any]], k: int) -> np.ndarray | None:
    if set(map(len, values)) != {k}:
        return None
    arr = _numbers(list(itertools.chain.from_iterable(values)))
    return None if arr is None else arr.reshape(len(values), k)


def _labelled(values: list[Any], classes: Mapping[Any, int], k: int) -> np.ndarray | None:
    cs = list(map(classes.get, values))
    if None in cs:
        return None
    scores = np.zeros((len(values), k))
    scores[np.arange(len(values)), np.array(cs, dtype=np.int64)] = 1.0
    return scores


def _mapped(
    values: list[dict[Any, Any]],
    classes: Mapping[Any, int],
    keys_in_order: tuple[str, ...] | None,
    k: int,
) -> np.ndarray | None:
    if not all(values):  # an empty object is no vote: one by one
        return None
    arr = _numbers(list(itertools.chain.from_iterable(map(dict.values, values))))
    if arr is None:
        return None
    if keys_in_order is not None and all(map(keys_in_order.__eq__, map(tuple, values))):
        return arr.reshape(len(values), k)  # a score for every label, in class order
    labels = list(itertools.chain.from_iterable(values))
    if not set(map(type, labels)) <= _LABEL_TYPES:
        return None
    cs = list(map(classes.get, labels))
    if None in cs:
        return None
    at = np.repeat(np.arange(len(values), dtype=np.int64) * k, list(map(len, values)))
    at += np.array(cs, dtype=np.int64)
    ordered = np.sort(at)
    if (ordered[1:] == ordered[:-1]).any():  # two keys of one vote name the same class
        return None
    scores = np.zeros(len(values) * k)
    scores[at] = arr
    return scores.reshape(len(values), k)


@dataclass(slots=True)  # not frozen: made for each trial, and frozen costs twice
class _RawPayload:
    """The payload ``{MEMBER: <object>}`` whose object is ``text[start:end]``, JSON that
    :func:`app.core.jsontext.members` has read (so any JSON parser reads it to the
    same document)."""

    MEMBER: ClassVar[str]
    text: bytes
    start: int
    end: int

    def document(self) -> dict[str, Any]:
        """The payload as a parsed document."""
        return {self.MEMBER: json.loads(self.text[self.start : self.end])}


class RawExperts(_RawPayload):
    """The payload ``{"experts": <object>}``, its object as JSON text."""

    __slots__ = ()
    MEMBER = "experts"


class RawFeatures(_RawPayload):
    """The payload ``{"features": <object>}``, its object as JSON text."""

    __slots__ = ()
    MEMBER = "features"


RawPayload = RawExperts | RawFeatures


@dataclass(frozen=True)
class NameTable:
    """Names as the compiled readers match them: name ``j`` is the UTF-8 text
    ``blob[ptr[j]:ptr[j + 1]]``, standing for ``index[j]``."""

    blob: np.ndarray  # uint8
    ptr: np.ndarray  # int64
    index: np.ndarray  # int64

    @classmethod
    def of(cls, names: Mapping[str, int]) -> NameTable:
        texts = [name.encode() for name in names]
        ptr = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum([len(t) for t in texts], out=ptr[1:])
        blob = np.frombuffer(b"".join(texts) or b"\0", dtype=np.uint8)
        return cls(blob, ptr, np.fromiter(names.values(), dtype=np.int64, count=len(texts)))


def raw_expert_votes(
    items: Sequence[RawExperts], experts: NameTable, labels: NameTable, int_labels: bool, k: int
) -> Votes | None:
    """The votes of the ``experts`` objects ``items``, as :func:`expert_votes` reads their
    documents, given ``experts`` (each known expert by name) and ``labels`` (each class by
    its label as a JSON object key; ``int_labels``: the labels are integers, and a vote
    may name one as a JSON integer); None when the compiled reader refuses them."""
    n, expert, row, scores = read_votes(
        *_texts(items), experts.blob, experts.ptr, labels.blob, labels.ptr, k, int_labels
    )
    if n < 0:
        return None
    return Votes(experts.index[expert[:n]], row[:n], scores[:n])


def raw_vote_rows(
    items: Sequence[RawExperts], experts: NameTable, labels: NameTable, int_labels: bool, k: int
) -> tuple[np.ndarray, ...] | None:
    """The votes :func:`raw_expert_votes` reads, as
    :func:`models.kernels.instances.vote_rows` gives their instances: ``(e, c, v, ptr,
    sizes, classes, low, high)``, in one compiled call; None when they are refused."""
    n, *rows = read_vote_rows(*_texts(items), *_by_name(experts, labels), k, int_labels)
    return None if n < 0 else tuple(rows)


def _by_name(
    experts: NameTable, labels: NameTable
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The tables the compiled vote readers find names in, as they take them."""
    return experts.blob, experts.ptr, experts.index, labels.blob, labels.ptr


def raw_vote_row(
    item: RawExperts, experts: NameTable, labels: NameTable, int_labels: bool, k: int
) -> Experts | None:
    """:func:`raw_vote_rows` of one payload, as its instance; None when it is refused."""
    text = np.frombuffer(item.text, dtype=np.uint8)
    n, e, c, v, size, classes, low, high = read_vote_row(
        text, item.start, item.end, *_by_name(experts, labels), k, int_labels
    )
    return None if n < 0 else Experts.row(e, c, v, size, classes, low, high)


def raw_sparse_attribute(item: RawFeatures, d: int, constant: bool) -> Attributes | None:
    """:func:`raw_sparse_attributes` of one payload: its instance, or None."""
    ok, idx, val, size, low, high = read_feature_row(
        np.frombuffer(item.text, dtype=np.uint8), item.start, item.end, d, constant
    )
    return Attributes.row(idx, val, size, low, high) if ok else None


def raw_sparse_attributes(
    items: Sequence[RawFeatures], d: int, constant: bool
) -> list[Attributes | None]:
    """The attributes of each ``features`` object ``items``, ``{"<index>": value}``
    over features ``0..d-1`` (then the constant at ``d`` if ``constant``), as
    :func:`sparse_attributes` gives those of their documents, read from their text in one
    compiled pass; None for an object the pass refuses (then parse it)."""
    ok, *rows = read_features(*_texts(items), d, constant)
    got = Attributes.rows(*rows)
    return [x if good else None for x, good in zip(got, ok.tolist(), strict=True)]


def _texts(items: Sequence[RawPayload]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(b, starts, ends)``: one text holding the objects ``items``, object ``t`` at
    ``b[starts[t]:ends[t]]``."""
    if len(items) == 1:
        x = items[0]
        return np.frombuffer(x.text, dtype=np.uint8), np.array([x.start]), np.array([x.end])
    first = items[0].text
    if all(x.text is first for x in items):
        text, offsets = first, [0] * len(items)
    else:
        texts = [x.text for x in items]
        text = b"".join(texts)
        offsets = list(itertools.accumulate(map(len, texts), initial=0))
    starts = np.array([o + x.start for o, x in zip(offsets, items, strict=False)], dtype=np.int64)
    ends = np.array([o + x.end for o, x in zip(offsets, items, strict=False)], dtype=np.int64)
    return np.frombuffer(text, dtype=np.uint8), starts, ends
