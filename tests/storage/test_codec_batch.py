"""Instances and log entries decoded together are decoded as one by one, errors included."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from models.core.instance import (
    AttributeBatch,
    Attributes,
    ExpertBatch,
    Experts,
    consecutive_expert_rows,
    consecutive_rows,
)
from models.kernels import logentries
from storage.codec import (
    LogEntry,
    decode_entries,
    decode_entry,
    decode_instance,
    decode_instances,
    encode_instance,
    encode_instances,
    read_flat,
)
from storage.errors import CorruptData

VALUES = st.sampled_from([1.0, -2.5, 0.25, 3e300, 0.0, float("nan"), float("inf")])
GOOD = st.sampled_from([1.0, -2.5, 0.25, 3e300])
# what may be wrong with an instance kept in order: one value, or a repeated place
FLAWS = st.sampled_from([None, None, 0.0, float("nan"), float("-inf"), "repeat"])


@st.composite
def stored(draw: Any, size: int = 6, k: int = 4) -> bytes:
    """The bytes of an instance as the log may hold them: mostly kept in order for a
    model of ``size`` and ``k`` classes, with at most one flaw, else with any fault a
    stored instance can have."""
    tag = draw(st.sampled_from([b"E", b"E", b"A", b"A", b"F", b"F", b"Q", b""]))
    m = draw(st.integers(0, 6))
    top = max(size - 1, 0)
    if tag == b"F":
        return draw(rows(m, top, k))
    if draw(st.integers(0, 3)):  # kept in order
        if tag == b"A":
            places: list[Any] = sorted(draw(st.sets(st.integers(0, top), max_size=m)))
        else:
            pairs = st.tuples(st.integers(0, top), st.integers(0, k - 1))
            places = sorted(draw(st.sets(pairs, max_size=m)))
        values = [draw(GOOD) for _ in places]
        flaw = draw(FLAWS)
        if places and flaw is not None:
            at = draw(st.integers(0, len(places) - 1))
            if flaw == "repeat":
                places.insert(at, places[at])
                values.insert(at, 1.0)
            else:
                values[at] = flaw
        arrays = [places] if tag == b"A" else [[p[0] for p in places], [p[1] for p in places]]
    else:
        arrays = [draw(st.lists(st.integers(-1, 8), min_size=m, max_size=m))]
        if tag != b"A":
            arrays.append(draw(st.lists(st.integers(-1, 4), min_size=m, max_size=m)))
        values = draw(st.lists(VALUES, min_size=m, max_size=m))
    body = b"".join(np.array(a, "<i4").tobytes() for a in arrays)
    data = tag + body + np.array(values, "<f8").tobytes()
    cut = draw(st.sampled_from([0, 0, 0, 1, -1]))
    return data + b"\x00" if cut > 0 else data[:cut] if cut < 0 else data


@st.composite
def rows(draw: Any, m: int, top: int, k: int) -> bytes:
    """The bytes of a full-row instance of ``m`` experts up to ``top`` as the log may hold
    them: mostly in order, rows of at most ``k`` classes, with at most one flaw."""
    r = draw(st.sampled_from([*range(1, k + 1)] * 3 + [0, -1, k + 1]))
    if draw(st.integers(0, 3)):  # kept in order
        experts = sorted(draw(st.sets(st.integers(0, top), max_size=m)))
        values = [draw(GOOD) for _ in range(len(experts) * max(r, 0))]
        flaw = draw(FLAWS)
        if experts and flaw is not None:
            at = draw(st.integers(0, len(experts) - 1))
            if flaw == "repeat":
                experts.insert(at, experts[at])
                values += [1.0] * max(r, 0)
            elif values:
                values[draw(st.integers(0, len(values) - 1))] = flaw
    else:
        experts = draw(st.lists(st.integers(-1, 8), min_size=m, max_size=m))
        values = draw(st.lists(VALUES, min_size=m * max(r, 0), max_size=m * max(r, 0)))
    data = b"F" + np.array([r, *experts], "<i4").tobytes() + np.array(values, "<f8").tobytes()
    cut = draw(st.sampled_from([0, 0, 0, 1, -1, -9]))
    return data + b"\x00" if cut > 0 else data[:cut] if cut < 0 else data


def same_instance(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    if isinstance(a, CorruptData):
        assert str(a) == str(b)
        return
    arrays = ("indices", "values") if isinstance(a, Attributes) else ("expert", "cls", "value")
    for name in arrays:
        u, v = getattr(a, name), getattr(b, name)
        assert u.dtype == v.dtype and np.array_equal(u, v), name
        assert not v.flags.writeable, name
    scalars = ("size", "low", "high") + (("n_classes",) if isinstance(a, Experts) else ())
    assert [getattr(a, s) for s in scalars] == [getattr(b, s) for s in scalars]


def one(data: bytes, size: int, k: int) -> Attributes | Experts | CorruptData:
    try:
        return decode_instance(data, size, k)
    except CorruptData as e:
        return e


@settings(max_examples=400, deadline=None)
@given(st.lists(stored(), max_size=8), st.integers(0, 6), st.integers(1, 4))
def test_instances_together_are_each_as_decoded_alone(data: list[bytes], size: int, k: int) -> None:
    together = decode_instances(data, size, k)
    assert len(together) == len(data)
    for t, (d, got) in enumerate(zip(data, together, strict=True)):
        try:
            same_instance(one(d, size, k), got)
        except AssertionError as e:
            raise AssertionError(f"instance {t} ({d!r}): {e}") from None


FIELDS = st.sampled_from(
    [
        [b"k", b"n", b"y", b"1"],
        [b"k", b"l", b"t", b"t1", b"y", b"0", b"p", b"1", b"v", b"2"],
        [b"k", b"l", b"y", b"1"],  # a label entry without p and t
        [b"k", b"n", b"y", b"9"],  # a class the model has not
        [b"k", b"r"],
        [b"k", b"n"],  # no y
        [b"k", b"n", b"i", b"key-1", b"y", b"0"],
        [b"k", b"n", b"i", b"a key", b"y", b"0"],  # not printable ASCII
        [b"k", b"n", b"y", b"0", b"y", b"1"],  # twice: the last one counts
        [b"k", b"l", b"t", b"t1", b"y", b"0", b"p", b"1", b"v", b"99"],  # served later
    ]
)


@st.composite
def entry(draw: Any) -> tuple[bytes, list[bytes]]:
    fields = list(draw(FIELDS))
    if draw(st.integers(0, 5)):
        fields += [b"x", draw(stored())]
    if not draw(st.integers(0, 7)):
        fields += [b"x", draw(stored())]  # twice: the last one counts
    if not draw(st.integers(0, 9)):
        fields.append(b"odd")
    return draw(st.sampled_from([b"5-0", b"6-0", b"x-0", b"7-1"])), fields


def one_entry(e: tuple[bytes, list[bytes]], size: int, k: int) -> LogEntry | CorruptData:
    try:
        return decode_entry(*e, size, k)
    except CorruptData as exc:
        return exc


@settings(max_examples=300, deadline=None)
@given(st.lists(entry(), max_size=8), st.integers(0, 6), st.integers(2, 4))
def test_entries_together_are_each_as_decoded_alone(
    entries: list[tuple[bytes, list[bytes]]], size: int, k: int
) -> None:
    together = decode_entries(entries, size, k)
    assert len(together) == len(entries)
    for e, got in zip(entries, together, strict=True):
        alone = one_entry(e, size, k)
        assert type(alone) is type(got)
        if isinstance(alone, CorruptData):
            assert str(alone) == str(got)
            continue
        assert isinstance(got, LogEntry)
        assert alone._replace(x=None) == got._replace(x=None)
        if alone.x is None:
            assert got.x is None
        else:
            same_instance(alone.x, got.x)


@st.composite
def votes(draw: Any) -> Experts:
    """Sub-experts' votes: mostly every class of each expert, now and then with gaps."""
    n, k = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    dense = np.array(draw(st.lists(GOOD, min_size=n * k, max_size=n * k))).reshape(n, k)
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        dense[draw(st.integers(0, n - 1)), draw(st.integers(0, k - 1))] = 0.0
    x = Experts.from_dense(dense)
    return Experts(x.expert, x.cls, x.value)  # its extent as the stored form gives it


@settings(max_examples=300, deadline=None)
@given(votes(), st.booleans())
def test_an_instance_reads_back_as_it_was_in_either_form(x: Experts, rows: bool) -> None:
    data = encode_instance(x, rows)
    counts = np.bincount(x.expert) if x.expert.size else np.zeros(0, dtype=np.int64)
    full = rows and x.expert.size > 0 and set(counts[counts > 0].tolist()) == {x.n_classes}
    assert data[:1] == (b"F" if full else b"E")
    if full:  # a row of votes per expert: 4 bytes for k, 4 per expert, 8 per vote
        assert len(data) == 1 + 4 + 4 * len(set(x.expert.tolist())) + 8 * x.expert.size
    size = int(x.expert.max()) + 1 if x.expert.size else 0
    same_instance(one(data, size, x.n_classes), x)
    same_instance(decode_instances([data, data], size, x.n_classes)[1], x)


@st.composite
def attributes(draw: Any) -> Attributes:
    """Sparse attributes, or a row of a batch (views of arrays shared with others)."""
    places = sorted(draw(st.sets(st.integers(0, 2**31 - 1), max_size=6)))
    x = Attributes(np.array(places, dtype=np.int64), np.array([draw(GOOD) for _ in places]))
    if draw(st.booleans()):
        return x
    rows = Attributes.rows(
        np.concatenate([x.indices, x.indices]),
        np.concatenate([x.values, x.values]),
        np.array([0, len(places), 2 * len(places)]),
        np.array([x.size, x.size]),
        np.array([x.low, x.low]),
        np.array([x.high, x.high]),
    )
    return rows[1]


@settings(max_examples=300, deadline=None)
@given(st.lists(attributes() | votes(), max_size=8), st.booleans())
def test_instances_encoded_together_are_each_as_encoded_alone(
    xs: list[Attributes | Experts], rows: bool
) -> None:
    assert encode_instances(xs, rows) == [encode_instance(x, rows) for x in xs]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.dictionaries(st.integers(0, 2**31 - 1), GOOD, max_size=5), min_size=1, max_size=8),
    st.data(),
)
def test_rows_of_a_batch_encode_as_each_alone_in_a_run_or_not(
    docs: list[dict[int, float]], data: Any
) -> None:
    """A run of a batch's rows, in order, is encoded from the batch's arrays at once;
    rows out of order, or a row apart, as any instances: each as encoded alone."""
    xs = [Attributes.coerce(d) for d in docs]
    sizes = [x.indices.size for x in xs]
    rows = Attributes.rows(
        np.concatenate([x.indices for x in xs]),
        np.concatenate([x.values for x in xs]),
        np.cumsum([0, *sizes]),
        np.array([x.size for x in xs]),
        np.array([x.low for x in xs]),
        np.array([x.high for x in xs]),
    )
    a = data.draw(st.integers(0, len(rows) - 1))
    b = data.draw(st.integers(a + 1, len(rows)))
    run = rows[a:b]
    assert consecutive_rows(run) == (rows[0].source[0], a)
    assert encode_instances(run) == [encode_instance(x) for x in xs[a:b]]
    picked = data.draw(st.permutations(rows)) if len(rows) > 1 else [*rows, *rows]
    if consecutive_rows(picked) is None:
        assert encode_instances(picked) == [encode_instance(x) for x in picked]


@settings(max_examples=300, deadline=None)
@given(st.lists(entry(), min_size=1, max_size=8), st.integers(0, 6), st.integers(2, 4))
def test_entries_read_flat_are_each_as_decoded_alone_or_left_to_the_decoder(
    entries: list[tuple[bytes, list[bytes]]], size: int, k: int
) -> None:
    entries = [(b"%d-0" % (t + 1), f) for t, (_, f) in enumerate(entries)]
    flat = read_flat(entries)
    assert flat is not None and flat.first == 1
    for t, e in enumerate(entries):
        alone = one_entry(e, size, k)
        status = int(flat.status[t])
        if status == logentries.RESET:
            assert isinstance(alone, LogEntry) and alone.kind == "reset"
        if status not in (logentries.LEARN, logentries.LABEL) or not flat.fits(t, t + 1, size, k):
            continue  # (left to the full decoder)
        assert isinstance(alone, LogEntry) and alone.x is not None
        assert alone.kind == ("learn" if status == logentries.LEARN else "label")
        assert (alone.y, alone.served_at) == (flat.y[t], flat.served_at[t])
        assert (-1 if alone.predicted is None else alone.predicted) == flat.predicted[t]
        row = flat.batch.between(int(flat.row[t]), int(flat.row[t]) + 1)
        if isinstance(alone.x, Experts):
            assert isinstance(row, ExpertBatch)
            got = (row.expert, row.cls, row.value)
            want = (alone.x.expert, alone.x.cls, alone.x.value)
        else:
            assert isinstance(row, AttributeBatch)
            got, want = (row.indices, row.values), (alone.x.indices, alone.x.values)
        for a, b in zip(got, want, strict=True):
            assert a.tolist() == b.tolist()
        assert int(flat.extent[flat.row[t]]) == alone.x.size


def test_entries_out_of_order_or_not_bytes_are_not_read_flat() -> None:
    fields = [b"k", b"n", b"x", encode_instance(Attributes([1], [1.0])), b"y", b"0"]
    assert read_flat([(b"1-0", fields), (b"3-0", fields)]) is None
    assert read_flat([(b"1-0", [*fields[:-1], "0"])]) is None
    assert read_flat([]) is None
    got = read_flat([(b"1-0", fields), (b"2-0", fields)])
    assert got is not None and got.status.tolist() == [logentries.LEARN] * 2


@settings(max_examples=300, deadline=None)
@given(st.lists(votes(), min_size=1, max_size=8), st.booleans(), st.data())
def test_rows_of_a_batch_of_votes_encode_as_each_alone(
    xs: list[Experts], rows: bool, data: Any
) -> None:
    """A run of a batch of votes' rows (each row full, with gaps, or empty), in order, is
    encoded in one compiled pass, each block as the row encoded alone, in either form."""
    if data.draw(st.booleans()):
        xs = [*xs, Experts(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))]
    batch = ExpertBatch.from_instances(xs)
    got = Experts.rows(
        batch.expert, batch.cls, batch.value, batch.indptr,
        np.array([x.size for x in xs]), np.array([x.n_classes for x in xs]),
        np.array([x.low for x in xs]), np.array([x.high for x in xs]),
    )  # fmt: skip
    a = data.draw(st.integers(0, len(got) - 1))
    b = data.draw(st.integers(a + 1, len(got)))
    assert consecutive_expert_rows(got[a:b]) == (got[0].source[0], a)
    assert encode_instances(got[a:b], rows) == [encode_instance(x, rows) for x in xs[a:b]]
