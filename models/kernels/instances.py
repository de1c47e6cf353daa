"""Compiled passes over instances (numba, cached on disk): the checks of an instance read
back from storage, and the instances of a batch of votes; each one pass over the arrays
instead of a dozen numpy passes."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "ascending_attributes",
    "ascending_experts",
    "attribute_blocks",
    "blocks_attributes",
    "blocks_experts",
    "digit_keys",
    "expert_blocks",
    "full_rows",
    "sparse_rows",
    "vote_rows",
]


@njit(cache=True, nogil=True)
def ascending_experts(
    e: np.ndarray, c: np.ndarray, v: np.ndarray, k: int
) -> tuple[bool, np.ndarray, np.ndarray, np.ndarray, int, float, float]:
    """``(ok, e, c, v, n_classes, low, high)``: int64 and float64 copies of the triples,
    the classes they vote for and their value range, with ``ok`` true when the pairs
    (e, c) strictly ascend, 0 <= e, 0 <= c < k, and every vote is finite and non-zero."""
    n = e.size
    out_e = np.empty(n, dtype=np.int64)
    out_c = np.empty(n, dtype=np.int64)
    out_v = np.empty(n, dtype=np.float64)
    top, low, high = 0, np.inf, -np.inf
    limit = (2**62) // max(k, 1)  # e * k + c stays within int64
    previous = -1
    for i in range(n):
        ei, ci, vi = int(e[i]), int(c[i]), float(v[i])
        if ei < 0 or ei >= limit or ci < 0 or ci >= k or vi == 0.0 or not np.isfinite(vi):
            return False, out_e, out_c, out_v, 0, 0.0, 0.0
        key = ei * k + ci
        if key <= previous:
            return False, out_e, out_c, out_v, 0, 0.0, 0.0
        previous = key
        out_e[i], out_c[i], out_v[i] = ei, ci, vi
        if ci >= top:
            top = ci + 1
        if vi < low:
            low = vi
        if vi > high:
            high = vi
    if n == 0:
        low, high = 0.0, 0.0
    return True, out_e, out_c, out_v, top, low, high


@njit(cache=True, nogil=True)
def ascending_attributes(
    idx: np.ndarray, val: np.ndarray
) -> tuple[bool, np.ndarray, np.ndarray, float, float]:
    """``(ok, idx, val, low, high)``: int64 and float64 copies of an attribute instance
    and its value range, with ``ok`` true when the indices strictly ascend from 0 or more
    (below 2**62) and every value is finite and non-zero."""
    n = idx.size
    out_i = np.empty(n, dtype=np.int64)
    out_v = np.empty(n, dtype=np.float64)
    low, high = np.inf, -np.inf
    previous = -1
    for j in range(n):
        i, x = int(idx[j]), float(val[j])
        if i <= previous or i >= 2**62 or x == 0.0 or not np.isfinite(x):
            return False, out_i, out_v, 0.0, 0.0
        previous = i
        out_i[j], out_v[j] = i, x
        if x < low:
            low = x
        if x > high:
            high = x
    if n == 0:
        low, high = 0.0, 0.0
    return True, out_i, out_v, low, high


@njit(cache=True, nogil=True)
def digit_keys(chars: np.ndarray, n_keys: int, d: int) -> tuple[bool, np.ndarray]:
    """``(ok, idx)``: the ``n_keys`` comma-separated keys in ``chars`` (ASCII bytes) as
    int64 indices, with ``ok`` true when each is 1 to 18 decimal digits and below ``d``."""
    idx = np.zeros(n_keys, dtype=np.int64)
    at, value, digits = 0, 0, 0
    for ch in chars:
        if ch == 44:  # ","
            if digits == 0 or at >= n_keys - 1:
                return False, idx
            idx[at] = value
            at, value, digits = at + 1, 0, 0
            continue
        digit = int(ch) - 48
        if digit < 0 or digit > 9 or digits == 18:
            return False, idx
        value = value * 10 + digit
        digits += 1
    if digits == 0 or at != n_keys - 1:
        return False, idx
    idx[at] = value
    for i in range(n_keys):
        if idx[i] >= d:
            return False, idx
    return True, idx


@njit(cache=True, nogil=True, inline="always")
def close_row(
    out_i: np.ndarray,
    out_v: np.ndarray,
    first: int,
    w: int,
    d: int,
    constant: bool,
    t: int,
    size: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
) -> int:
    """End row ``t`` of attributes, its pairs at ``first:w`` of ``out_i`` and ``out_v``:
    the constant (index ``d``, value 1) if ``constant``, then its extent and value range
    in ``size``, ``low`` and ``high``; the row's end."""
    if constant:
        out_i[w], out_v[w] = d, 1.0
        w += 1
    if w > first:
        size[t] = out_i[w - 1] + 1
        low[t] = out_v[first:w].min()
        high[t] = out_v[first:w].max()
    return w


@njit(cache=True, nogil=True)
def sparse_rows(
    counts: np.ndarray, idx: np.ndarray, val: np.ndarray, d: int, constant: bool
) -> tuple[bool, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(ok, idx, val, ptr, size, low, high)``: rows of attributes, row ``t`` holding
    the pairs ``counts[t]`` after the previous rows' in ``idx`` (below ``d``) and ``val``
    (finite), as an instance keeps them: sorted by index, zeros dropped, then the
    constant (index ``d``, value 1) if ``constant``; row ``t`` at ``ptr[t]:ptr[t + 1]``
    with its extent and value range. ``ok`` is false when an index repeats in a row."""
    n = counts.size
    out_i = np.empty(idx.size + (n if constant else 0), dtype=np.int64)
    out_v = np.empty(out_i.size, dtype=np.float64)
    ptr = np.zeros(n + 1, dtype=np.int64)
    size = np.zeros(n, dtype=np.int64)
    low = np.zeros(n)
    high = np.zeros(n)
    start, w = 0, 0
    for t in range(n):
        end = start + counts[t]
        order = np.arange(start, end)
        for j in range(start + 1, end):
            if idx[j] <= idx[j - 1]:
                order = start + np.argsort(idx[start:end], kind="mergesort")
                break
        first = w
        for j in range(order.size):
            i, x = idx[order[j]], val[order[j]]
            if j > 0 and i == idx[order[j - 1]]:
                return False, out_i, out_v, ptr, size, low, high
            if x != 0.0:
                out_i[w], out_v[w] = i, x
                w += 1
        w = close_row(out_i, out_v, first, w, d, constant, t, size, low, high)
        ptr[t + 1] = w
        start = end
    return True, out_i[:w], out_v[:w], ptr, size, low, high


@njit(cache=True, nogil=True)
def vote_rows(
    row: np.ndarray, expert: np.ndarray, scores: np.ndarray, n: int
) -> tuple[
    np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray
]:
    """``(e, c, v, ptr, sizes, classes, low, high)``: the non-zero votes ``scores[j, c]``
    of expert ``expert[j]`` in instance ``row[j] < n`` as triples sorted by (instance,
    expert, class), instance ``t`` holding ``ptr[t]:ptr[t + 1]``, with its extent (the
    top expert, plus one), the classes it votes for (the top one, plus one) and its value
    range; an expert votes at most once per instance."""
    votes, k = scores.shape
    order = np.arange(votes)
    for j in range(1, votes):
        if row[j] < row[j - 1] or (row[j] == row[j - 1] and expert[j] < expert[j - 1]):
            order = np.argsort(row * (expert.max() + 1) + expert, kind="mergesort")
            break
    nonzero = 0
    for j in range(votes):
        for c in range(k):
            if scores[j, c] != 0.0:
                nonzero += 1
    e = np.empty(nonzero, dtype=np.int64)
    c_out = np.empty(nonzero, dtype=np.int64)
    v = np.empty(nonzero, dtype=np.float64)
    ptr = np.zeros(n + 1, dtype=np.int64)
    sizes = np.zeros(n, dtype=np.int64)
    classes = np.zeros(n, dtype=np.int64)
    low = np.zeros(n)
    high = np.zeros(n)
    at = 0
    for at_vote in range(votes):
        j = order[at_vote]
        t = row[j]
        for c in range(k):
            x = scores[j, c]
            if x == 0.0:
                continue
            if ptr[t + 1] == 0 or x < low[t]:
                low[t] = x
            if ptr[t + 1] == 0 or x > high[t]:
                high[t] = x
            ptr[t + 1] += 1
            if c + 1 > classes[t]:
                classes[t] = c + 1
            sizes[t] = expert[j] + 1
            e[at], c_out[at], v[at] = expert[j], c, x
            at += 1
    for t in range(n):
        ptr[t + 1] += ptr[t]
    return e, c_out, v, ptr, sizes, classes, low, high


@njit(cache=True, nogil=True)
def full_rows(e: np.ndarray, c: np.ndarray) -> int:  # pragma: no cover
    """``k`` when the triples' pairs ``(e, c)``, as an instance keeps them, are every
    class ``0 .. k - 1`` of each of their experts, in order; else 0 (and for none)."""
    n = e.size
    if n == 0:
        return 0
    k = c[n - 1] + 1
    if n % k != 0:
        return 0
    for i in range(n):
        if c[i] != i % k or e[i] != e[i - i % k]:
            return 0
    return k


@njit(cache=True, nogil=True)
def blocks_experts(
    buf: np.ndarray, starts: np.ndarray, counts: np.ndarray, full: np.ndarray, k: int
) -> tuple[np.ndarray, ...]:
    """``(e, c, v, ptr, ok, sizes, classes, low, high)``: the expert instances held in
    the bytes ``buf`` as blocks of ``counts[t]`` triples from ``starts[t]`` on:
    ``counts[t]`` int32 experts, as many int32 classes, then as many float64 votes
    (native order); or, where ``full[t]`` is some ``r > 0``, one int32 expert per row of
    ``r`` votes then the votes, every class ``0 .. r - 1`` of each row in order. Their
    triples as int64 and float64, instance ``t``'s at ``ptr[t]:ptr[t + 1]``, with its
    extent, classes and value range; ``ok[t]`` as :func:`ascending_experts` tells for
    one (the rest of an instance that is not ok is left unset)."""
    n = starts.size
    ptr = np.zeros(n + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(counts)
    out_e = np.empty(ptr[n], dtype=np.int64)
    out_c = np.empty(ptr[n], dtype=np.int64)
    out_v = np.empty(ptr[n], dtype=np.float64)
    ok = np.zeros(n, dtype=np.bool_)
    sizes = np.zeros(n, dtype=np.int64)
    classes = np.zeros(n, dtype=np.int64)
    low = np.zeros(n)
    high = np.zeros(n)
    limit = (2**62) // max(k, 1)  # e * k + c stays within int64
    for t in range(n):
        m, s, p, r = counts[t], starts[t], ptr[t], full[t]
        # the experts (one per row when full), the classes (unread when full), the votes
        ne = m if r == 0 else m // r
        e = buf[s : s + 4 * ne].view(np.int32)
        nc = m if r == 0 else 0
        c = buf[s + 4 * ne : s + 4 * ne + 4 * nc].view(np.int32)
        at = s + 4 * ne + 4 * nc
        v = buf[at : at + 8 * m].view(np.float64)
        top, lo, hi, previous, good = 0, np.inf, -np.inf, -1, True
        for i in range(m):
            if r == 0:
                ei, ci = int(e[i]), int(c[i])
            else:
                ei, ci = int(e[i // r]), i % r
            vi = float(v[i])
            if ei < 0 or ei >= limit or ci < 0 or ci >= k or vi == 0.0 or not np.isfinite(vi):
                good = False
                break
            key = ei * k + ci
            if key <= previous:
                good = False
                break
            previous = key
            out_e[p + i], out_c[p + i], out_v[p + i] = ei, ci, vi
            if ci >= top:
                top = ci + 1
            if vi < lo:
                lo = vi
            if vi > hi:
                hi = vi
        if good:
            ok[t] = True
            if m:
                sizes[t], classes[t], low[t], high[t] = out_e[p + m - 1] + 1, top, lo, hi
    return out_e, out_c, out_v, ptr, ok, sizes, classes, low, high


@njit(cache=True, nogil=True)
def blocks_attributes(
    buf: np.ndarray, starts: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, ...]:
    """``(idx, val, ptr, ok, sizes, low, high)``: the attribute instances held in the
    bytes ``buf`` as blocks, instance ``t`` from ``starts[t]`` on as ``counts[t]`` int32
    indices, then as many float64 values (native order); as :func:`blocks_experts` gives
    expert instances, ``ok[t]`` as :func:`ascending_attributes` tells for one."""
    n = starts.size
    ptr = np.zeros(n + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(counts)
    out_i = np.empty(ptr[n], dtype=np.int64)
    out_v = np.empty(ptr[n], dtype=np.float64)
    ok = np.zeros(n, dtype=np.bool_)
    sizes = np.zeros(n, dtype=np.int64)
    low = np.zeros(n)
    high = np.zeros(n)
    for t in range(n):
        m, s, p = counts[t], starts[t], ptr[t]
        idx = buf[s : s + 4 * m].view(np.int32)
        val = buf[s + 4 * m : s + 12 * m].view(np.float64)
        lo, hi, previous, good = np.inf, -np.inf, -1, True
        for j in range(m):
            i, x = int(idx[j]), float(val[j])
            if i <= previous or i >= 2**62 or x == 0.0 or not np.isfinite(x):
                good = False
                break
            previous = i
            out_i[p + j], out_v[p + j] = i, x
            if x < lo:
                lo = x
            if x > hi:
                hi = x
        if good:
            ok[t] = True
            if m:
                sizes[t], low[t], high[t] = out_i[p + m - 1] + 1, lo, hi
    return out_i, out_v, ptr, ok, sizes, low, high


@njit(cache=True, nogil=True)
def attribute_blocks(tag: int, ib: np.ndarray, vb: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """The rows of a batch as blocks one after another: row ``t``'s block is the byte
    ``tag``, the bytes of its indices, then those of its values, its entries
    ``ptr[t]:ptr[t + 1]`` (``ptr`` from 0) of ``ib`` (4 bytes each) and ``vb`` (8
    bytes each); block ``t`` starts at ``t + 12 * ptr[t]``."""
    n = ptr.size - 1
    out = np.empty(n + 12 * ptr[n], dtype=np.uint8)
    o = 0
    for t in range(n):
        a, z = ptr[t], ptr[t + 1]
        out[o] = tag
        o += 1
        out[o : o + 4 * (z - a)] = ib[4 * a : 4 * z]
        o += 4 * (z - a)
        out[o : o + 8 * (z - a)] = vb[8 * a : 8 * z]
        o += 8 * (z - a)
    return out


@njit(cache=True, nogil=True)
def expert_blocks(
    eb: np.ndarray, cb: np.ndarray, vb: np.ndarray, e: np.ndarray, c: np.ndarray,
    ptr: np.ndarray, rows: bool,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip  # pragma: no cover
    """The rows of a batch of votes as blocks one after another, ``(bytes, starts)``:
    row ``t`` (its triples ``ptr[t]:ptr[t + 1]``, ``ptr`` from 0, of the experts ``e``
    and classes ``c``, whose bytes are ``eb`` and ``cb``, 4 each, and the votes' ``vb``, 8
    each) as the byte ``F``, ``k`` in 4 bytes, one expert per row of ``k`` votes, then the
    votes, where ``rows`` and the row holds every class ``0 .. k - 1`` of each of its
    experts (:func:`full_rows`); else as the byte ``E``, the experts, the classes, the
    votes. Block ``t`` is ``bytes[starts[t]:starts[t + 1]]``."""
    n = ptr.size - 1
    out = np.empty(5 * n + 16 * ptr[n], dtype=np.uint8)
    starts = np.empty(n + 1, dtype=np.int64)
    o = 0
    for t in range(n):
        starts[t] = o
        a, z = ptr[t], ptr[t + 1]
        k = full_rows(e[a:z], c[a:z]) if rows else 0
        if k > 0:
            out[o] = 70  # F
            for b in range(4):
                out[o + 1 + b] = (k >> (8 * b)) & 255
            o += 5
            for i in range(a, z, k):
                out[o : o + 4] = eb[4 * i : 4 * i + 4]
                o += 4
        else:
            out[o] = 69  # E
            o += 1
            out[o : o + 4 * (z - a)] = eb[4 * a : 4 * z]
            o += 4 * (z - a)
            out[o : o + 4 * (z - a)] = cb[4 * a : 4 * z]
            o += 4 * (z - a)
        out[o : o + 8 * (z - a)] = vb[8 * a : 8 * z]
        o += 8 * (z - a)
    starts[n] = o
    return out[:o], starts
