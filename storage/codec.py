"""Binary forms of what a trial stores: instances, labels and log entries.

An instance is one tag byte and little-endian arrays: ``A`` + int32 indices + float64
values for attributes, ``E`` + int32 experts + int32 classes + float64 votes for
sub-experts, and ``F`` + int32 ``k`` + int32 experts + float64 votes for sub-experts that
each vote for every class ``0 .. k - 1`` (a row of ``k`` votes per expert, about half the
bytes of ``E``). Everything read back is validated as strictly as user input and raises
:class:`~storage.errors.CorruptData` naming what is wrong.
"""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import Callable, Sequence
from typing import NamedTuple, cast

import numpy as np

from models.core.instance import (
    AttributeBatch,
    Attributes,
    ExpertBatch,
    Experts,
    InvalidInstance,
    consecutive_expert_rows,
    consecutive_rows,
)
from models.kernels import logentries
from models.kernels.instances import attribute_blocks, expert_blocks, full_rows
from storage.errors import CorruptData

__all__ = [
    "MAX_CHANGE",
    "FlatEntries",
    "LogEntry",
    "decode_entries",
    "decode_entry",
    "decode_instance",
    "decode_instances",
    "encode_instance",
    "encode_instances",
    "entry_kind",
    "entry_stamp",
    "fold_id",
    "held_or_decoded",
    "parse_int",
    "read_flat",
    "served_at",
    "valid_stamp",
]

#: the largest change of a model's input a log entry holds, in bytes of JSON
MAX_CHANGE = 1 << 20

_I4 = np.dtype("<i4")
_F8 = np.dtype("<f8")


def encode_instance(x: Attributes | Experts, rows: bool = True) -> bytes:
    """The binary form of ``x``; ``rows``: sub-experts who each vote for every class in
    the ``F`` form (else always ``E``, which every release reads)."""
    if isinstance(x, Attributes):
        return b"A" + x.indices.astype(_I4).tobytes() + x.values.astype(_F8).tobytes()
    k = full_rows(x.expert, x.cls) if rows else 0
    if k:
        return (
            b"F"
            + k.to_bytes(4, "little")
            + x.expert[::k].astype(_I4).tobytes()
            + x.value.astype(_F8).tobytes()
        )
    return (
        b"E"
        + x.expert.astype(_I4).tobytes()
        + x.cls.astype(_I4).tobytes()
        + x.value.astype(_F8).tobytes()
    )


def encode_instances(xs: Sequence[Attributes | Experts], rows: bool = True) -> list[bytes]:
    """:func:`encode_instance` of each of ``xs``: the attributes among them converted
    together (a batch's share arrays), then cut apart."""
    run = consecutive_rows(xs)
    if run is not None:  # rows of one batch, in order: their blocks in one pass
        batch, t = run
        ptr = batch.indptr[t : t + len(xs) + 1]
        a, z = int(ptr[0]), int(ptr[-1])
        ib = batch.indices[a:z].astype(_I4).view(np.uint8)
        vb = batch.values[a:z].astype(_F8).view(np.uint8)
        bounds = ptr - a
        data = attribute_blocks(ord("A"), ib, vb, bounds).tobytes()
        at = (np.arange(len(xs) + 1) + 12 * bounds).tolist()
        return [data[p:q] for p, q in itertools.pairwise(at)]
    experts = consecutive_expert_rows(xs) if len(xs) > 1 else None
    if experts is not None:  # votes, rows of one batch in order: likewise
        votes, t = experts
        ptr = votes.indptr[t : t + len(xs) + 1]
        a, z = int(ptr[0]), int(ptr[-1])
        e, c = votes.expert[a:z], votes.cls[a:z]
        blocks, starts = expert_blocks(
            e.astype(_I4).view(np.uint8), c.astype(_I4).view(np.uint8),
            votes.value[a:z].astype(_F8).view(np.uint8), e, c, ptr - a, rows,
        )  # fmt: skip
        data = blocks.tobytes()
        return [data[p:q] for p, q in itertools.pairwise(starts.tolist())]
    at = [t for t, x in enumerate(xs) if isinstance(x, Attributes)]
    if len(at) < 2:
        return [encode_instance(x, rows) for x in xs]
    attributes = [x for x in xs if isinstance(x, Attributes)]
    ends = np.cumsum([x.indices.size for x in attributes]).tolist()
    idx = np.concatenate([x.indices for x in attributes]).astype(_I4).tobytes()
    val = np.concatenate([x.values for x in attributes]).astype(_F8).tobytes()
    out = [b""] * len(xs)
    a = 0
    for t, z in zip(at, ends, strict=True):
        out[t] = b"A" + idx[4 * a : 4 * z] + val[8 * a : 8 * z]
        a = z
    for t, x in enumerate(xs):
        if not isinstance(x, Attributes):
            out[t] = encode_instance(x, rows)
    return out


def _rows_of(data: bytes | memoryview) -> tuple[int, int]:
    """``(k, rows)`` of an ``F`` instance's bytes after the tag, as its length allows;
    ``(k, 0)`` when they are not whole rows (or too short to hold ``k``)."""
    if len(data) < 4:
        return 0, 0
    k = int.from_bytes(data[:4], "little", signed=True)
    if k < 1:
        return k, 0
    rows, rest = divmod(len(data) - 4, 4 + 8 * k)
    return k, 0 if rest else rows


def decode_instance(data: bytes, size: int, n_classes: int) -> Attributes | Experts:
    """Decode and check an instance of at most ``size`` coordinates and ``n_classes``."""
    if not isinstance(data, bytes) or not data:
        raise CorruptData(f"instance is {data!r}: expected tagged binary arrays")
    tag, body = data[:1], memoryview(data)[1:]
    try:
        if tag == b"A":
            n, rest = divmod(len(body), 12)
            if rest:
                raise CorruptData(f"attribute instance of {len(body)} bytes: not 12 per entry")
            # as encode_instance writes them, checked at once; else read (and checked)
            # as any instance
            idx = np.frombuffer(body, _I4, n)
            val = np.frombuffer(body, _F8, n, 4 * n)
            got = Attributes.ascending(idx, val)
            x: Attributes | Experts = Attributes(idx, val) if got is None else got
            top = x.size
        elif tag == b"E":
            n, rest = divmod(len(body), 16)
            if rest:
                raise CorruptData(f"expert instance of {len(body)} bytes: not 16 per entry")
            e = np.frombuffer(body, _I4, n)
            c = np.frombuffer(body, _I4, n, 4 * n)
            v = np.frombuffer(body, _F8, n, 8 * n)
            kept = Experts.ascending(e, c, v, n_classes)
            x = Experts(e, c, v) if kept is None else kept
            top = x.size
            if x.n_classes > n_classes:
                raise CorruptData(f"instance votes for class {x.n_classes - 1} of {n_classes}")
        elif tag == b"F":
            k, rows = _rows_of(body)
            if not 1 <= k <= n_classes:
                raise CorruptData(f"full-row instance of {k} classes: expected 1 to {n_classes}")
            if not rows:
                raise CorruptData(
                    f"full-row instance of {len(body)} bytes: not 4 + {4 + 8 * k} per row"
                )
            e = np.repeat(np.frombuffer(body, _I4, rows, 4), k)
            c = np.tile(np.arange(k, dtype=_I4), rows)
            v = np.frombuffer(body, _F8, rows * k, 4 + 4 * rows)
            # read-only as E's arrays over the stored bytes: the same compiled check
            e.flags.writeable = c.flags.writeable = False
            kept = Experts.ascending(e, c, v, n_classes)
            x = Experts(e, c, v) if kept is None else kept
            top = x.size
        else:
            raise CorruptData(f"instance tag {tag!r}: expected b'A', b'E' or b'F'")
    except InvalidInstance as e:
        raise CorruptData(f"stored instance: {e}") from None
    if top > size:
        raise CorruptData(f"instance has coordinate {top - 1}, beyond the model's {size}")
    return x


# the blocks are read in native byte order: the compiled pass serves where that is the
# stored one's (little-endian)
_NATIVE = sys.byteorder == "little"
_A, _E, _F = ord("A"), ord("E"), ord("F")


def decode_instances(
    data: Sequence[bytes], size: int, n_classes: int
) -> list[Attributes | Experts | CorruptData]:
    """:func:`decode_instance` of each of ``data``, or the error it raises. Those of whole
    entries kept in order (as :func:`encode_instance` writes them) are read together, one
    compiled pass for the attributes and one for the sub-experts; any other is decoded
    alone, which says what is wrong with it."""
    out: list[Attributes | Experts | CorruptData | None] = [None] * len(data)
    if _NATIVE:
        # (item, offset of its arrays, count, the row length of an F instance or 0)
        attributes: list[tuple[int, int, int, int]] = []
        experts: list[tuple[int, int, int, int]] = []
        for t, d in enumerate(data):
            if type(d) is not bytes or len(d) < 2:
                continue
            if d[0] == _E and (len(d) - 1) % 16 == 0:
                experts.append((t, 1, (len(d) - 1) // 16, 0))
            elif d[0] == _F:
                k, rows = _rows_of(memoryview(d)[1:])
                if rows and k <= n_classes:
                    experts.append((t, 5, rows * k, k))
            elif d[0] == _A and (len(d) - 1) % 12 == 0:
                attributes.append((t, 1, (len(d) - 1) // 12, 0))
        for todo in (attributes, experts):
            if not todo:
                continue
            text = b"".join([data[t[0]] for t in todo])
            lengths = np.fromiter((len(data[t[0]]) for t in todo), np.int64, len(todo))
            starts = np.cumsum(lengths) - lengths + [t[1] for t in todo]
            counts = np.array([t[2] for t in todo], dtype=np.int64)
            buf = np.frombuffer(text, np.uint8)
            got: Sequence[Attributes | Experts | None] = (
                Attributes.many_from_blocks(buf, starts, counts)
                if todo is attributes
                else Experts.many_from_blocks(
                    buf, starts, counts, n_classes, np.array([t[3] for t in todo], np.int64)
                )
            )
            for item, x in zip(todo, got, strict=True):
                if x is not None and x.size <= size:
                    out[item[0]] = x
    done: list[Attributes | Experts | CorruptData] = []
    for t, kept in enumerate(out):
        if kept is None:
            try:
                kept = decode_instance(data[t], size, n_classes)
            except CorruptData as e:
                kept = e
        done.append(kept)
    return done


def fold_id(key: str) -> str:
    """The id under which the outcome of a learn entry appended with idempotency key
    ``key`` is folded: into that key's record (see :mod:`storage.scripts`), so a retry
    is answered whoever replays the entry; "" for a learn without a key."""
    return f"!{key}" if key else ""


def parse_int(value: object, what: str, low: int = 0, high: int | None = None) -> int:
    """A non-negative decimal integer stored by the service, checked against its range."""
    try:
        if not isinstance(value, bytes | str) or not value.isdigit():
            raise ValueError
        n = int(value)
    except ValueError:
        raise CorruptData(f"{what} is {value!r}: expected a decimal integer") from None
    if n < low or (high is not None and n > high):
        raise CorruptData(f"{what} is {n}: expected {low}..{high}")
    return n


_STAMP = re.compile(rb"[0-9a-f]{1,40}")


def valid_stamp(value: object, what: str) -> str:
    """A write's stamp as stored (lower-case hex, see :func:`storage.repository.new_stamp`);
    "" for none (written before stamps were kept)."""
    if value is None or value == b"":
        return ""
    if not isinstance(value, bytes) or not _STAMP.fullmatch(value):
        raise CorruptData(f"{what}: its stamp {value!r} is not one the service writes")
    return value.decode("ascii")


def entry_kind(fields: list[bytes]) -> bytes | None:
    """The kind field (``k``) of a stream entry (its flat field list), unchecked."""
    for i in range(0, len(fields) - 1, 2):
        if fields[i] == b"k":
            return fields[i + 1]
    return None


def entry_stamp(fields: list[bytes]) -> str:
    """The stamp of a stream entry (its flat field list, as XRANGE returns it)."""
    for i in range(len(fields) - 2, -1, -2):  # the stamp is written last
        if fields[i] == b"w":
            return valid_stamp(fields[i + 1], "a log entry")
    return ""


class LogEntry(NamedTuple):
    """One applied trial as the log holds it.

    ``kind`` is ``"label"`` (a labelled prediction; ``predicted`` is the served class,
    ``served_at`` the version that served it, -1 when the entry does not say),
    ``"learn"`` (``predicted`` is None: the learner's own prediction at replay;
    ``trial_id`` is ``!<key>`` for one appended with an idempotency key) or
    ``"reset"`` (the state was replaced by the snapshot at ``seq``; no instance) or
    ``"change"`` (the model's input changed: ``change`` is the change as JSON; no
    instance).
    """

    seq: int
    kind: str
    x: Attributes | Experts | None
    y: int
    predicted: int | None
    trial_id: str
    change: bytes = b""
    served_at: int = -1


def served_at(fields: list[bytes], seq: int) -> int:
    """The version that served the prediction of label entry ``seq`` (its flat field
    list), -1 when it does not say (see :func:`_served_at`)."""
    for i in range(0, len(fields) - 1, 2):
        if fields[i] == b"v":
            return _served_at(fields[i + 1], seq)
    return -1


def _served_at(v: bytes, seq: int) -> int:
    """Advisory (a backtest predicts there): a version the entry cannot have (none before
    it was kept; after a failover lost entries, one beyond the label's) is unknown, -1,
    rather than a fault of the entry."""
    return int(v) if v.isdigit() and len(v) <= 18 and int(v) < seq else -1


def _index(value: object, high: int) -> int:
    """``value`` as :func:`parse_int` reads it when it is a short decimal in 0..``high``
    (what the scripts write), else -1: the caller then asks :func:`parse_int`, which
    says what is wrong. Entries are decoded by the thousand when a model loads: the
    common case builds no message."""
    if type(value) is bytes and len(value) <= 18 and value.isdigit():
        n = int(value)
        if n <= high:
            return n
    return -1


def decode_entries(
    entries: Sequence[tuple[bytes, list[bytes]]],
    size: int,
    n_classes: int,
    known: Callable[[bytes], Attributes | Experts | None] | None = None,
) -> list[LogEntry | CorruptData]:
    """:func:`decode_entry` of each entry, or the error it raises; their instances
    decoded together (:func:`decode_instances`). ``known`` gives, for an instance's
    bytes, the instance they decode to when the caller holds it (None when not): it is
    taken as it is when it fits ``size`` and ``n_classes`` as a decoded one must."""
    found = [(t, x) for t, (_, f) in enumerate(entries) if (x := _last(f, b"x")) is not None]
    got = held_or_decoded([x for _, x in found], size, n_classes, known)
    xs = {t: x for (t, _), x in zip(found, got, strict=True)}
    out: list[LogEntry | CorruptData] = []
    for t, (entry_id, fields) in enumerate(entries):
        try:
            out.append(decode_entry(entry_id, fields, size, n_classes, xs.get(t)))
        except CorruptData as e:
            out.append(e)
    return out


def held_or_decoded(
    data: Sequence[bytes],
    size: int,
    n_classes: int,
    known: Callable[[bytes], Attributes | Experts | None] | None = None,
) -> list[Attributes | Experts | CorruptData]:
    """The instance each of ``data`` decodes to (:func:`decode_instances`), or the error
    decoding raises; where ``known`` gives the instance for those bytes (see
    :func:`decode_entries`), that one, when it fits ``size`` and ``n_classes`` as a
    decoded one must."""
    out: list[Attributes | Experts | CorruptData | None] = [None] * len(data)
    rest: list[int] = []
    for t, d in enumerate(data):
        got = known(d) if known is not None and type(d) is bytes else None
        if got is not None and got.size <= size and _within(got, n_classes):
            out[t] = got
        else:
            rest.append(t)
    decoded = decode_instances([data[t] for t in rest], size, n_classes)
    for t, x in zip(rest, decoded, strict=True):
        out[t] = x
    return cast(list[Attributes | Experts | CorruptData], out)


def _within(x: Attributes | Experts, n_classes: int) -> bool:
    """Whether ``x`` votes only for classes below ``n_classes`` (attributes: always)."""
    return not isinstance(x, Experts) or x.n_classes <= n_classes


def _last(fields: list[bytes], name: bytes) -> bytes | None:
    """The value of the last field ``name`` of a flat field list (as a dict of it
    keeps), None when there is none or the list is odd."""
    if len(fields) % 2:
        return None
    for i in range(len(fields) - 2, -1, -2):
        if fields[i] == name:
            return fields[i + 1]
    return None


def decode_entry(
    entry_id: bytes,
    fields: list[bytes],
    size: int,
    n_classes: int,
    x: Attributes | Experts | CorruptData | None = None,
) -> LogEntry:
    """Decode one stream entry as returned by XRANGE (id, flat field list); ``x``: its
    instance (field ``x``) decoded already, or the error decoding it raised."""
    ms, _, tail = entry_id.partition(b"-")
    seq = _index(ms, 2**62) if tail == b"0" else -1
    if seq < 1:
        sid = entry_id.decode("ascii", "replace")
        ms_text, _, tail_text = sid.partition("-")
        if tail_text != "0":
            raise CorruptData(f"log entry id {sid!r}: expected '<seq>-0'")
        seq = parse_int(ms_text, "log entry id", 1)
    if len(fields) % 2:
        raise CorruptData(f"log entry {seq}: odd field list")
    pairs = iter(fields)
    f = dict(zip(pairs, pairs, strict=False))  # even: checked above
    kind = f.get(b"k")
    if kind == b"r":
        return LogEntry(seq, "reset", None, 0, None, "")
    if kind == b"c":
        change = f.get(b"c")
        if not isinstance(change, bytes) or not 0 < len(change) <= MAX_CHANGE:
            raise CorruptData(f"log entry {seq}: a change entry needs field c (JSON)")
        return LogEntry(seq, "change", None, 0, None, "", change)
    if kind not in (b"l", b"n") or b"x" not in f or b"y" not in f:
        raise CorruptData(f"log entry {seq}: expected fields k (l or n), x and y")
    if x is None:
        x = decode_instance(f[b"x"], size, n_classes)
    elif isinstance(x, CorruptData):
        raise x
    y = _index(f[b"y"], n_classes - 1)
    if y < 0:
        y = parse_int(f[b"y"], f"log entry {seq} label", 0, n_classes - 1)
    if kind == b"l":
        if b"p" not in f or b"t" not in f:
            raise CorruptData(f"log entry {seq}: a label entry needs fields p and t")
        p = _index(f[b"p"], n_classes - 1)
        if p < 0:
            p = parse_int(f[b"p"], f"log entry {seq} prediction", 0, n_classes - 1)
        at = _served_at(f.get(b"v", b""), seq)
        return LogEntry(seq, "label", x, y, p, f[b"t"].decode("ascii", "replace"), b"", at)
    key = f.get(b"i", b"")
    if len(key) > 255 or not all(0x21 <= c <= 0x7E for c in key):
        raise CorruptData(f"log entry {seq}: its idempotency key is not printable ASCII")
    return LogEntry(seq, "learn", x, y, None, fold_id(key.decode("ascii")))


class FlatEntries(NamedTuple):
    """A run of log entries read together by :func:`read_flat`: entry ``first + t`` at
    index ``t`` of each per-entry array, its instance row ``row[t]`` of ``batch``.

    ``status`` is :data:`~models.kernels.logentries.REFUSED` for an entry to decode by
    :func:`decode_entry` (one not as the service writes it, and every change), else its
    kind (``LEARN``, ``LABEL`` or ``RESET``). For a learn or label entry, ``y`` and
    ``predicted`` (-1 for a learn) are as stored, ``served_at`` as
    :attr:`LogEntry.served_at`, and its row's ``extent`` and ``classes`` as the
    decoded instance's ``size`` and ``n_classes``: the entry decodes against a model
    of ``size`` coordinates and ``n_classes`` classes to the same entry, with its row
    as instance, when its extent is at most ``size`` and its classes, label and
    prediction are below ``n_classes`` (:meth:`fits`).
    """

    first: int
    status: np.ndarray
    y: np.ndarray
    predicted: np.ndarray
    served_at: np.ndarray
    row: np.ndarray
    batch: AttributeBatch | ExpertBatch
    extent: np.ndarray
    classes: np.ndarray

    def fits(self, a: int, z: int, size: int, n_classes: int) -> bool:
        """Whether entries ``a`` to ``z - 1`` (indices) are all learn or label entries
        read here that decode against ``size`` and ``n_classes`` (see the class)."""
        status = self.status[a:z]
        if not bool(((status == logentries.LEARN) | (status == logentries.LABEL)).all()):
            return False
        rows = self.row[a:z]
        ra, rz = int(rows[0]), int(rows[-1]) + 1  # (accepted entries' rows are in order)
        return (
            int(self.extent[ra:rz].max()) <= size
            and int(self.classes[ra:rz].max()) <= n_classes
            and int(self.y[a:z].max()) < n_classes
            and int(self.predicted[a:z].max()) < n_classes
        )


def read_flat(entries: Sequence[tuple[bytes, list[bytes]]]) -> FlatEntries | None:
    """The entries (ids and flat field lists, in seq order, as XRANGE returns them) read
    together in one compiled pass (:func:`models.kernels.logentries.read_entries`),
    their instances as one batch; None when they cannot be (an item not bytes, a byte
    order other than the stored one, or no entry)."""
    if not _NATIVE or not entries:
        return None
    ids = [e[0] for e in entries]
    fields = [e[1] for e in entries]
    items = [*ids, *itertools.chain.from_iterable(fields)]
    if not set(map(type, items)) <= {bytes}:
        return None
    n_fields = np.fromiter(map(len, fields), np.int64, len(fields))
    ends = np.cumsum(np.fromiter(map(len, items), np.int64, len(items)))
    buf = np.frombuffer(b"".join(items), np.uint8)
    form, status, seq, y, p, served, row, ptr, a, c, v, extent, classes = logentries.read_entries(
        buf, ends, n_fields
    )
    first = int(seq[0])
    if first < 1 or not bool((seq == np.arange(first, first + len(entries))).all()):
        return None  # (the caller checks the order of the entries it takes)
    batch: AttributeBatch | ExpertBatch = (
        ExpertBatch.trusted(ptr, a, c, v)
        if form[0] == logentries.FORM_EXPERTS
        else AttributeBatch.trusted(ptr, a, v)
    )
    return FlatEntries(first, status, y, p, served, row, batch, extent, classes)
