"""Instances: sparse attribute vectors and sub-expert vote matrices (Mesterharm 1999, §3-4).

Two canonical forms reach the learners, both sparse so that a trial costs O(non-zeros):

* :class:`Attributes`, an attribute vector x: parallel arrays of distinct indices and
  their non-zero values.
* :class:`Experts`, a sub-expert instance: the k x n matrix A_x of per-class votes, kept
  as triples (expert, class, value) sorted by expert then class, zeros omitted.

Both validate on construction (finite values, non-negative distinct indices) and record
their extent and value range so a learner checks size and range in O(1). The functions at
the end build the derived forms of Mesterharm 1999, §4.3-4.4: attributes as sub-experts,
threshold sub-experts, and hybrids.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from models.kernels.instances import (
    ascending_attributes,
    ascending_experts,
    blocks_attributes,
    blocks_experts,
)

__all__ = [
    "AttributeBatch",
    "Attributes",
    "ExpertBatch",
    "Experts",
    "InvalidInstance",
    "attributes_as_experts",
    "concat_experts",
    "consecutive_expert_rows",
    "consecutive_rows",
    "threshold_experts",
]

_EMPTY_I = np.zeros(0, dtype=np.int64)
_EMPTY_F = np.zeros(0, dtype=np.float64)


class InvalidInstance(ValueError):
    """An instance is malformed or does not fit the learner; the message says why."""


def _as_array(values: Any, what: str, kinds: str, expected: str) -> np.ndarray:
    """A fresh one-dimensional array of ``values`` whose dtype kind is one of ``kinds``."""
    try:
        arr = np.array(values)  # a copy: the caller's array is never aliased nor frozen
    except (TypeError, ValueError, OverflowError):
        raise InvalidInstance(f"{what} must be {expected}") from None
    if arr.size == 0:
        return arr.reshape(0)
    if arr.dtype.kind not in kinds:
        raise InvalidInstance(f"{what} must be {expected}, got {arr.dtype.name} values")
    if arr.ndim != 1:
        raise InvalidInstance(f"{what} must be one-dimensional, got shape {list(arr.shape)}")
    return arr


def _as_values(values: Any, what: str) -> np.ndarray:
    arr = _as_array(values, what, "iuf", "numbers").astype(np.float64)
    if not np.isfinite(arr).all():
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise InvalidInstance(f"{what}[{bad}] is {arr[bad]}: expected a finite number")
    return arr


def _as_indices(indices: Any, what: str) -> np.ndarray:
    arr = _as_array(indices, what, "iuf", "a list of integers")
    if arr.size == 0:
        return _EMPTY_I.copy()
    if arr.dtype.kind == "f" and not (np.isfinite(arr).all() and (arr == np.floor(arr)).all()):
        raise InvalidInstance(f"{what} must be a list of integers")
    if arr.dtype.kind != "u" and arr.min() < 0:
        raise InvalidInstance(f"{what} must be >= 0, got {arr.min():g}")
    if (arr.dtype.kind == "f" or arr.dtype.itemsize > 4) and arr.max() >= 2**62:
        raise InvalidInstance(f"{what} must be < 2**62, got {arr.max():g}")
    return arr.astype(np.int64, copy=arr.dtype != np.int64)


class Attributes:
    """A sparse attribute vector: sorted distinct ``indices`` and their non-zero ``values``.

    Parameters
    ----------
    indices, values
        Parallel one-dimensional sequences. Zero values are dropped.

    Examples
    --------
    >>> x = Attributes.coerce([0.0, 1.0, 0.5])
    >>> x.indices.tolist(), x.values.tolist(), x.size
    ([1, 2], [1.0, 0.5], 3)

    An instance read as one row of a batch (:meth:`rows`) keeps the batch and its row
    in ``source``, so that work on a run of its rows takes the batch's arrays rather than
    joining the rows' (:func:`consecutive_rows`); None otherwise.
    """

    __slots__ = ("high", "indices", "low", "size", "source", "values")

    indices: np.ndarray
    values: np.ndarray
    size: int
    low: float
    high: float
    source: tuple[AttributeBatch, int] | None

    def __init__(self, indices: Any, values: Any) -> None:
        idx = _as_indices(indices, "feature indices")
        val = _as_array(values, "feature values", "iuf", "numbers").astype(np.float64)
        if idx.shape == val.shape and not np.isfinite(val).all():
            bad = int(np.flatnonzero(~np.isfinite(val))[0])
            raise InvalidInstance(
                f"feature values[{bad}] (feature {int(idx[bad])}) is {val[bad]}: "
                "expected a finite number"
            )
        if idx.shape != val.shape:
            raise InvalidInstance(
                f"{idx.size} feature indices but {val.size} feature values: expected equal lengths"
            )
        if idx.size > 1 and not (idx[1:] > idx[:-1]).all():
            order = np.argsort(idx, kind="stable")
            idx, val = idx[order], val[order]
            dup = idx[1:] == idx[:-1]
            if dup.any():
                raise InvalidInstance(f"feature index {int(idx[1:][dup][0])} appears twice")
        nz = val != 0.0
        if not nz.all():
            idx, val = idx[nz], val[nz]
        self._set(np.ascontiguousarray(idx), np.ascontiguousarray(val))

    def _set(self, idx: np.ndarray, val: np.ndarray, size: int | None = None) -> None:
        self.indices = idx
        self.values = val
        self.source = None
        self.size = int(idx.max()) + 1 if idx.size else 0
        if size is not None:
            self.size = max(self.size, size)
        self.low = float(val.min()) if val.size else 0.0
        self.high = float(val.max()) if val.size else 0.0
        idx.flags.writeable = False
        val.flags.writeable = False

    @classmethod
    def ascending(cls, indices: np.ndarray, values: np.ndarray) -> Attributes | None:
        """The instance of a one-dimensional integer array ``indices`` and float array
        ``values`` when they are as an instance keeps them (indices strictly ascending,
        values finite and non-zero), checked in one compiled pass over copies of them;
        None when they are not (the constructor then sorts them or says what is wrong)."""
        if not indices.ndim == values.ndim == 1 or indices.size != values.size:
            return None
        ok, idx, val, low, high = ascending_attributes(indices, values)
        if not ok:
            return None
        obj = cls.__new__(cls)
        obj.indices, obj.values, obj.source = idx, val, None
        obj.size = int(idx[-1]) + 1 if idx.size else 0
        obj.low, obj.high = low, high
        idx.flags.writeable = False
        val.flags.writeable = False
        return obj

    @classmethod
    def many_from_blocks(
        cls, buf: np.ndarray, starts: np.ndarray, counts: np.ndarray
    ) -> list[Attributes | None]:
        """The instances held in the bytes ``buf`` (a uint8 array) as blocks: instance
        ``t`` from ``starts[t]`` on as ``counts[t]`` int32 indices, then as many float64
        values, in native byte order. Each as :meth:`ascending` gives it, read in one
        compiled pass: None for one that is not kept so."""
        idx, val, ptr, ok, sizes, low, high = blocks_attributes(buf, starts, counts)
        rows = cls.rows(idx, val, ptr, sizes, low, high)
        return [x if good else None for x, good in zip(rows, ok.tolist(), strict=True)]

    @classmethod
    def rows(
        cls,
        idx: np.ndarray,
        val: np.ndarray,
        ptr: np.ndarray,
        sizes: np.ndarray,
        low: np.ndarray,
        high: np.ndarray,
    ) -> list[Attributes]:
        """One instance per row ``t``, ``ptr[t]:ptr[t + 1]`` of ``idx`` and ``val``
        (int64 and float64, as an instance keeps them, each row's indices ascending, its
        values finite and non-zero), with its extent and value range: views of the
        arrays, made read-only, each with its row of the batch they make as ``source``."""
        idx = np.ascontiguousarray(idx)
        val = np.ascontiguousarray(val)
        # the batch keeps the arrays as a batch joined from instances has them (writable:
        # the compiled learners take one kind), its rows read-only views of them
        batch = AttributeBatch.trusted(ptr, idx, val)
        idx, val = idx.view(), val.view()
        idx.flags.writeable = False
        val.flags.writeable = False
        out = []
        bounds = ptr.tolist()
        for t, (s, lo, hi) in enumerate(
            zip(sizes.tolist(), low.tolist(), high.tolist(), strict=True)
        ):
            x = cls.__new__(cls)
            a, b = bounds[t], bounds[t + 1]
            x.indices, x.values, x.size, x.low, x.high = idx[a:b], val[a:b], s, lo, hi
            x.source = (batch, t)
            out.append(x)
        return out

    @classmethod
    def row(
        cls, idx: np.ndarray, val: np.ndarray, size: int, low: float, high: float
    ) -> Attributes:
        """The one instance of :meth:`rows` whose row is the whole of ``idx`` and ``val``
        (contiguous int64 and float64), made read-only."""
        idx.flags.writeable = False
        val.flags.writeable = False
        x = cls.__new__(cls)
        x.indices, x.values, x.size, x.low, x.high = idx, val, size, low, high
        x.source = None
        return x

    @classmethod
    def _trusted(cls, idx: np.ndarray, val: np.ndarray) -> Attributes:
        """Wrap int64 indices already sorted and distinct, and finite values (internal
        use); zero values are dropped."""
        nz = val != 0.0
        if not nz.all():
            idx, val = idx[nz], val[nz]
        obj = cls.__new__(cls)
        obj._set(np.ascontiguousarray(idx), np.ascontiguousarray(val))
        return obj

    @classmethod
    def from_dense(cls, x: Any) -> Attributes:
        """Build from a dense vector; its length is kept as ``size``."""
        val = _as_values(x, "features")
        idx = np.flatnonzero(val).astype(np.int64)
        obj = cls.__new__(cls)
        obj._set(idx, np.ascontiguousarray(val[idx]), size=val.size)
        return obj

    @classmethod
    def from_mapping(cls, x: Mapping[Any, Any]) -> Attributes:
        """Build from a mapping ``{index: value}``."""
        keys = list(x.keys())
        for k in keys:
            if not isinstance(k, int | np.integer) or isinstance(k, bool) or not 0 <= k < 2**62:
                raise InvalidInstance(f"feature key {k!r} is not an integer index in [0, 2**62)")
        return cls(np.array(keys, dtype=np.int64), list(x.values()))

    @classmethod
    def coerce(cls, x: Any) -> Attributes:
        """Accept an :class:`Attributes`, a dense sequence or array, or a sparse mapping."""
        if isinstance(x, Attributes):
            return x
        if isinstance(x, Mapping):
            return cls.from_mapping(x)
        if isinstance(x, Experts):
            raise InvalidInstance("expected attributes, got a sub-expert instance")
        if isinstance(x, np.ndarray | Sequence) and not isinstance(x, str | bytes):
            return cls.from_dense(x)
        raise InvalidInstance(f"cannot read attributes from {type(x).__name__}")

    def dense(self, n: int) -> np.ndarray:
        out = np.zeros(n)
        out[self.indices] = self.values
        return out

    def __len__(self) -> int:
        return int(self.indices.size)

    def __repr__(self) -> str:
        items = zip(self.indices.tolist(), self.values.tolist(), strict=True)
        pairs = ", ".join(f"{i}: {v:g}" for i, v in items)
        return f"Attributes({{{pairs}}})"


class AttributeBatch:
    """Many attribute vectors in CSR form: row t is ``indices/values[indptr[t]:indptr[t+1]]``.

    Each row is kept sorted by index, like :class:`Attributes`.

        Validation is vectorised, so building a batch costs O(total non-zeros) in numpy, not a
        Python loop per row.
    """

    __slots__ = ("high", "indices", "indptr", "low", "size", "values")

    def __init__(self, indptr: Any, indices: Any, values: Any) -> None:
        ptr = _as_indices(indptr, "indptr")
        idx = _as_indices(indices, "feature indices")
        val = _as_values(values, "feature values")
        if ptr.size < 1 or ptr[0] != 0 or (np.diff(ptr) < 0).any():
            raise InvalidInstance("indptr must start at 0 and never decrease")
        if idx.shape != val.shape or int(ptr[-1]) != idx.size:
            raise InvalidInstance(
                f"indptr ends at {int(ptr[-1])} but there are {idx.size} indices and "
                f"{val.size} values"
            )
        rows = np.repeat(np.arange(ptr.size - 1), np.diff(ptr))
        inside = idx[1:] > idx[:-1]
        if idx.size > 1 and not (inside | (rows[1:] != rows[:-1])).all():
            # Sort each row by index, as Attributes does, so sums run in the same order.
            order = np.lexsort((idx, rows))
            idx, val, rows = idx[order], val[order], rows[order]
            same = (rows[1:] == rows[:-1]) & (idx[1:] == idx[:-1])
            if same.any():
                j = int(np.flatnonzero(same)[0])
                raise InvalidInstance(
                    f"instance {int(rows[j])}: feature index {int(idx[j])} appears twice"
                )
        self.indptr = np.ascontiguousarray(ptr)
        self.indices = np.ascontiguousarray(idx)
        self.values = np.ascontiguousarray(val)
        self.size = int(idx.max()) + 1 if idx.size else 0
        self.low = float(val.min()) if val.size else 0.0
        self.high = float(val.max()) if val.size else 0.0

    @classmethod
    def trusted(cls, ptr: np.ndarray, idx: np.ndarray, val: np.ndarray) -> AttributeBatch:
        """The batch of rows already as a batch keeps them (int64 ``ptr`` from 0, int64
        ``idx`` ascending within each row, finite non-zero float64 ``val``), unchecked;
        the arrays are taken, not copied."""
        obj = cls.__new__(cls)
        obj.indptr, obj.indices, obj.values = ptr, idx, val
        obj.size = int(idx.max()) + 1 if idx.size else 0
        obj.low = float(val.min()) if val.size else 0.0
        obj.high = float(val.max()) if val.size else 0.0
        return obj

    def between(self, a: int, b: int) -> AttributeBatch:
        """Rows ``a`` to ``b - 1`` as a batch of their own (views of this one's arrays)."""
        if a == 0 and b == len(self):
            return self
        lo, hi = int(self.indptr[a]), int(self.indptr[b])
        ptr = self.indptr[a : b + 1] - lo
        return AttributeBatch.trusted(ptr, self.indices[lo:hi], self.values[lo:hi])

    @classmethod
    def from_instances(cls, xs: Iterable[Any]) -> AttributeBatch:
        items = list(xs)
        run = consecutive_rows(items)
        if run is not None:  # rows of one batch, in order: its arrays
            batch, t = run
            return batch.between(t, t + len(items))
        if not all(type(x) is Attributes for x in items):
            items = [Attributes.coerce(x) for x in items]
        ptr = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum([x.indices.size for x in items], out=ptr[1:])
        if not items:
            return cls(ptr, _EMPTY_I, _EMPTY_F)
        return cls(
            ptr,
            np.concatenate([x.indices for x in items]),
            np.concatenate([x.values for x in items]),
        )

    def __len__(self) -> int:
        return int(self.indptr.size - 1)

    def __getitem__(self, t: int) -> Attributes:
        lo, hi = int(self.indptr[t]), int(self.indptr[t + 1])
        return Attributes(self.indices[lo:hi], self.values[lo:hi])


def consecutive_rows(xs: Sequence[Any]) -> tuple[AttributeBatch, int] | None:
    """``(batch, t)`` when ``xs`` are rows ``t``, ``t + 1``, ... of one batch, in order,
    as :meth:`Attributes.rows` made them; None otherwise (or when ``xs`` is empty)."""
    return _consecutive(xs, Attributes)


def _consecutive(xs: Sequence[Any], kind: type) -> Any:
    """:func:`consecutive_rows` of instances of ``kind``."""
    first = getattr(xs[0], "source", None) if xs and type(xs[0]) is kind else None
    if first is None:
        return None
    batch, t = first
    try:
        got = list(map(_SOURCE, xs))
    except AttributeError:  # one without a source
        return None
    if got != list(zip(itertools.repeat(batch), range(t, t + len(xs)), strict=False)):
        return None
    return first


_SOURCE = operator.attrgetter("source")


def _ascending(e: np.ndarray, c: np.ndarray) -> bool:
    """Whether the pairs (e[i], c[i]) of non-negative indices strictly ascend."""
    top = int(c.max()) + 1
    if int(e.max()) < 2**62 // top:  # e * top + c cannot overflow: one key per pair
        key = e * top + c
        return bool((key[1:] > key[:-1]).all())
    de, dc = e[1:] - e[:-1], c[1:] - c[:-1]
    return bool(((de > 0) | ((de == 0) & (dc > 0))).all())


class Experts:
    """A sparse sub-expert instance: triples (expert, class, value), sorted, zeros omitted.

    ``value`` is sub-expert ``expert``'s vote for class ``cls`` (Mesterharm 1999, §3.1,
    writes it x_i^j).

    Examples
    --------
    >>> x = Experts.from_dense([[1, 0], [0, 1], [0.5, 0.5]])
    >>> x.expert.tolist(), x.cls.tolist(), x.value.tolist()
    ([0, 1, 2, 2], [0, 1, 0, 1], [1.0, 1.0, 0.5, 0.5])

    An instance read as one row of a batch (:meth:`rows`) keeps the batch and its row in
    ``source``, as :class:`Attributes` does (:func:`consecutive_expert_rows`); None
    otherwise (or unset).
    """

    __slots__ = ("cls", "expert", "high", "low", "n_classes", "size", "source", "value")

    expert: np.ndarray
    cls: np.ndarray
    value: np.ndarray
    size: int
    n_classes: int
    low: float
    high: float
    source: tuple[ExpertBatch, int] | None

    def __init__(self, expert: Any, cls: Any, value: Any) -> None:
        e = _as_indices(expert, "expert indices")
        c = _as_indices(cls, "class indices")
        v = _as_values(value, "expert votes")
        if not (e.shape == c.shape == v.shape):
            raise InvalidInstance(
                f"{e.size} expert indices, {c.size} class indices and {v.size} votes: "
                "expected equal lengths"
            )
        nz = v != 0.0
        if not nz.all():
            e, c, v = e[nz], c[nz], v[nz]
        if e.size > 1 and not _ascending(e, c):
            order = np.lexsort((c, e))
            e, c, v = e[order], c[order], v[order]
            dup = (e[1:] == e[:-1]) & (c[1:] == c[:-1])
            if dup.any():
                j = int(np.flatnonzero(dup)[0])
                raise InvalidInstance(f"expert {int(e[j])} votes for class {int(c[j])} twice")
        self._set(np.ascontiguousarray(e), np.ascontiguousarray(c), np.ascontiguousarray(v))

    @classmethod
    def ascending(cls, e: np.ndarray, c: np.ndarray, v: np.ndarray, k: int) -> Experts | None:
        """The instance of one-dimensional integer arrays ``e`` and ``c`` and float array
        ``v`` when they are as an instance keeps them (pairs (e, c) strictly ascending,
        classes below ``k``, votes finite and non-zero), checked in one compiled pass
        over copies of them; None when they are not (the constructor then sorts them or
        says what is wrong)."""
        if not e.ndim == c.ndim == v.ndim == 1 or not e.size == c.size == v.size:
            return None
        ok, e, c, v, n_classes, low, high = ascending_experts(e, c, v, k)
        if not ok:
            return None
        obj = cls.__new__(cls)
        obj.expert, obj.cls, obj.value, obj.source = e, c, v, None
        obj.size = int(e[-1]) + 1 if e.size else 0
        obj.n_classes, obj.low, obj.high = n_classes, low, high
        for a in (e, c, v):
            a.flags.writeable = False
        return obj

    @classmethod
    def many_from_blocks(
        cls,
        buf: np.ndarray,
        starts: np.ndarray,
        counts: np.ndarray,
        k: int,
        full: np.ndarray | None = None,
    ) -> list[Experts | None]:
        """The instances held in the bytes ``buf`` (a uint8 array) as blocks: instance
        ``t`` from ``starts[t]`` on as ``counts[t]`` int32 experts, as many int32
        classes, then as many float64 votes, in native byte order; or, where
        ``full[t]`` is ``r > 0``, as one int32 expert per row of ``r`` votes, then the
        ``counts[t]`` votes (every class ``0 .. r - 1`` of each row, in order). Each as
        :meth:`ascending` gives it, read in one compiled pass: None for one that is not
        kept so."""
        if full is None:
            full = np.zeros(starts.size, dtype=np.int64)
        e, c, v, ptr, ok, sizes, classes, low, high = blocks_experts(buf, starts, counts, full, k)
        rows = cls.rows(e, c, v, ptr, sizes, classes, low, high)
        return [x if good else None for x, good in zip(rows, ok.tolist(), strict=True)]

    @classmethod
    def rows(
        cls,
        e: np.ndarray,
        c: np.ndarray,
        v: np.ndarray,
        ptr: np.ndarray,
        sizes: np.ndarray,
        classes: np.ndarray,
        low: np.ndarray,
        high: np.ndarray,
    ) -> list[Experts]:
        """One instance per row of the triples ``(e, c, v)`` (int64, int64, float64, as
        an instance keeps them): row ``t`` the triples ``ptr[t]:ptr[t + 1]``, with its
        extent, classes and value range; each views the shared arrays, made read-only,
        with its row of the batch they make as ``source``."""
        e, c, v = (np.ascontiguousarray(a) for a in (e, c, v))
        # the batch keeps the arrays writable (the compiled learners take one kind), its
        # rows read-only views of them
        batch = ExpertBatch.trusted(ptr, e, c, v)
        e, c, v = e.view(), c.view(), v.view()
        for arr in (e, c, v):
            arr.flags.writeable = False
        bounds = ptr.tolist()
        out = []
        for t, (s, n_classes, lo, hi) in enumerate(
            zip(sizes.tolist(), classes.tolist(), low.tolist(), high.tolist(), strict=True)
        ):
            x = cls.__new__(cls)
            a, b = bounds[t], bounds[t + 1]
            x.expert, x.cls, x.value = e[a:b], c[a:b], v[a:b]
            x.size, x.n_classes, x.low, x.high = s, n_classes, lo, hi
            x.source = (batch, t)
            out.append(x)
        return out

    @classmethod
    def row(
        cls,
        e: np.ndarray,
        c: np.ndarray,
        v: np.ndarray,
        size: int,
        n_classes: int,
        low: float,
        high: float,
    ) -> Experts:
        """The one instance of :meth:`rows` whose row is the whole of ``e``, ``c`` and
        ``v`` (contiguous int64, int64 and float64), made read-only."""
        for a in (e, c, v):
            a.flags.writeable = False
        x = cls.__new__(cls)
        x.expert, x.cls, x.value, x.source = e, c, v, None
        x.size, x.n_classes, x.low, x.high = size, n_classes, low, high
        return x

    def _set(self, e: np.ndarray, c: np.ndarray, v: np.ndarray, size: int | None = None) -> None:
        self.expert, self.cls, self.value, self.source = e, c, v, None
        self.size = int(e[-1]) + 1 if e.size else 0
        if size is not None:
            self.size = max(self.size, size)
        self.n_classes = int(c.max()) + 1 if c.size else 0
        self.low = float(v.min()) if v.size else 0.0
        self.high = float(v.max()) if v.size else 0.0
        for a in (e, c, v):
            a.flags.writeable = False

    @classmethod
    def _trusted(
        cls, e: np.ndarray, c: np.ndarray, v: np.ndarray, size: int | None = None
    ) -> Experts:
        """Wrap arrays already sorted, distinct, finite and non-zero (internal use)."""
        obj = cls.__new__(cls)
        obj._set(e, c, v, size)
        return obj

    @classmethod
    def from_dense(cls, votes: Any) -> Experts:
        """Build from an n x k array: row i is sub-expert i's votes for the k classes."""
        try:
            a = np.array(votes)
        except (TypeError, ValueError, OverflowError):
            raise InvalidInstance("expert votes must be an n x k array of numbers") from None
        if a.ndim != 2:
            raise InvalidInstance(f"expert votes must be an n x k array, got shape {list(a.shape)}")
        if a.size and a.dtype.kind not in "iuf":
            raise InvalidInstance(f"expert votes must be numbers, got {a.dtype.name} values")
        a = a.astype(np.float64)
        if not np.isfinite(a).all():
            i, j = (int(t[0]) for t in np.nonzero(~np.isfinite(a)))
            raise InvalidInstance(f"expert {i} vote for class {j} is {a[i, j]}: expected finite")
        e, c = np.nonzero(a)
        return cls._trusted(
            e.astype(np.int64), c.astype(np.int64), np.ascontiguousarray(a[e, c]), size=a.shape[0]
        )

    @classmethod
    def one_hot(cls, votes: Any) -> Experts:
        """Build from one class index per sub-expert (``votes[i]`` is sub-expert i's class)."""
        c = _as_indices(votes, "expert votes")
        e = np.arange(c.size, dtype=np.int64)
        return cls._trusted(e, c, np.ones(c.size), size=c.size)

    @classmethod
    def coerce(cls, x: Any) -> Experts:
        """Accept an :class:`Experts` or a dense n x k array of votes."""
        if isinstance(x, Experts):
            return x
        if isinstance(x, Attributes):
            raise InvalidInstance(
                "expected a sub-expert instance, got attributes (convert them with "
                "attributes_as_experts)"
            )
        return cls.from_dense(x)

    def dense(self, n: int, k: int) -> np.ndarray:
        out = np.zeros((n, k))
        out[self.expert, self.cls] = self.value
        return out

    def __len__(self) -> int:
        return int(self.expert.size)

    def __repr__(self) -> str:
        return f"Experts(n={self.size}, votes={len(self)})"


class ExpertBatch:
    """Many sub-expert instances in CSR form: row t is the triples
    ``expert/cls/value[indptr[t]:indptr[t+1]]``, each row as :class:`Experts` keeps it.

    ``size``, ``n_classes``, ``low`` and ``high`` are the largest extent and class count
    and the value range over every row, so a learner checks the batch as it checks one
    instance, and a batch that fits is one whose every row fits.
    """

    __slots__ = ("cls", "expert", "high", "indptr", "low", "n_classes", "size", "value")

    expert: np.ndarray
    cls: np.ndarray
    value: np.ndarray
    indptr: np.ndarray
    size: int
    n_classes: int
    low: float
    high: float

    @classmethod
    def trusted(cls, ptr: np.ndarray, e: np.ndarray, c: np.ndarray, v: np.ndarray) -> ExpertBatch:
        """The batch of rows already as instances keep them (int64 ``ptr`` from 0, int64
        ``e`` and ``c``, each row's pairs ascending, finite non-zero float64 ``v``),
        unchecked; the arrays are taken, not copied."""
        obj = cls.__new__(cls)
        obj.indptr, obj.expert, obj.cls, obj.value = ptr, e, c, v
        obj.size = int(e.max()) + 1 if e.size else 0
        obj.n_classes = int(c.max()) + 1 if c.size else 0
        obj.low = float(v.min()) if v.size else 0.0
        obj.high = float(v.max()) if v.size else 0.0
        if v.size and bool((ptr[1:] == ptr[:-1]).any()):  # an empty row's range is [0, 0]
            obj.low, obj.high = min(obj.low, 0.0), max(obj.high, 0.0)
        return obj

    def between(self, a: int, b: int) -> ExpertBatch:
        """Rows ``a`` to ``b - 1`` as a batch of their own (views of this one's arrays)."""
        if a == 0 and b == len(self):
            return self
        lo, hi = int(self.indptr[a]), int(self.indptr[b])
        ptr = self.indptr[a : b + 1] - lo
        return ExpertBatch.trusted(ptr, self.expert[lo:hi], self.cls[lo:hi], self.value[lo:hi])

    @classmethod
    def from_instances(cls, xs: Sequence[Experts]) -> ExpertBatch:
        """The batch of instances ``xs``: the arrays of the batch they are consecutive
        rows of (:func:`consecutive_expert_rows`), else theirs joined."""
        run = consecutive_expert_rows(xs)
        if run is not None:
            batch, t = run
            return batch.between(t, t + len(xs))
        ptr = np.zeros(len(xs) + 1, dtype=np.int64)
        np.cumsum([x.expert.size for x in xs], out=ptr[1:])
        if not xs:
            return cls.trusted(ptr, _EMPTY_I, _EMPTY_I, _EMPTY_F)
        return cls.trusted(
            ptr,
            np.concatenate([x.expert for x in xs]),
            np.concatenate([x.cls for x in xs]),
            np.concatenate([x.value for x in xs]),
        )

    def __len__(self) -> int:
        return int(self.indptr.size - 1)


def consecutive_expert_rows(xs: Sequence[Any]) -> tuple[ExpertBatch, int] | None:
    """:func:`consecutive_rows` of sub-expert instances, as :meth:`Experts.rows` made
    them."""
    return _consecutive(xs, Experts)


def attributes_as_experts(x: Attributes, k: int, offset: int = 0) -> Experts:
    """Each attribute i becomes k sub-experts (i, c), numbered ``offset + i*k + c``.

    Sub-expert (i, c) votes x_i for class c and 0 for every other class, so a linear-max
    learner over them is a linear machine with weight matrix W[c][i] = w[i*k + c]
    (Mesterharm 1999, §4.3).
    """
    m = x.indices.size
    e = (offset + x.indices[:, None] * k + np.arange(k)[None, :]).reshape(m * k)
    c = np.tile(np.arange(k, dtype=np.int64), m)
    v = np.repeat(x.values, k)
    return Experts._trusted(np.ascontiguousarray(e, dtype=np.int64), c, v, size=offset + x.size * k)


def threshold_experts(k: int, offset: int = 0) -> Experts:
    """k sub-experts numbered from ``offset``; sub-expert ``offset + c`` always votes 1 for c."""
    e = offset + np.arange(k, dtype=np.int64)
    return Experts._trusted(e, np.arange(k, dtype=np.int64), np.ones(k), size=offset + k)


def concat_experts(parts: Sequence[Experts]) -> Experts:
    """Join sub-expert instances whose expert numbers do not overlap, in ascending blocks."""
    if not parts:
        raise InvalidInstance("no sub-expert blocks to join")
    if len(parts) == 1:
        return parts[0]
    last = -1
    for p in parts:
        if len(p) and p.expert[0] <= last:
            raise InvalidInstance("sub-expert blocks overlap or are out of order")
        if len(p):
            last = int(p.expert[-1])
    e = np.concatenate([p.expert for p in parts])
    return Experts._trusted(
        e,
        np.concatenate([p.cls for p in parts]),
        np.concatenate([p.value for p in parts]),
        size=max(p.size for p in parts),
    )
