"""Compiled reader of a run of stored log entries (numba, cached on disk): their ids,
kinds, labels and instances read in one pass over their bytes into flat arrays, the
instances as the rows of one batch, with no object per entry.

It reads the entries as the service writes them and *refuses* any other (status
:data:`REFUSED`): the caller then decodes that one entry by the full decoder
(:func:`storage.codec.decode_entry`), which says what is wrong with it or reads it. So
whatever this reader accepts, the full decoder reads to the same entry; the checks that
depend on the model's input as it is where the entry is replayed (its extent and
classes, the label's range) are left to the caller, who has the row's extent and
classes and the entry's label and prediction for them.

The bytes are read in native byte order: the caller uses this reader only where that is
the stored one's (little-endian).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "CHANGE",
    "FORM_ATTRIBUTES",
    "FORM_EXPERTS",
    "FORM_NONE",
    "LABEL",
    "LEARN",
    "REFUSED",
    "RESET",
    "read_entries",
]

# an entry's status: refused (to the full decoder), or its kind
REFUSED, LEARN, LABEL, CHANGE, RESET = 0, 1, 2, 3, 4
# the instances' form: attributes (tag A) or sub-experts (tags E and F)
FORM_NONE, FORM_ATTRIBUTES, FORM_EXPERTS = 0, 1, 2

_MAX_DIGITS = 18  # a stored integer of more digits is refused
_MAX_KEY = 255  # an idempotency key's longest
_A, _E, _F = 65, 69, 70
# one-byte field names the decoder reads (a bit each, to refuse a repeated one)
_K, _X, _Y, _P, _T, _V, _I = 107, 120, 121, 112, 116, 118, 105


@njit(cache=True, nogil=True, inline="always")
def _digits(buf: np.ndarray, a: int, z: int) -> int:
    """The decimal integer ``buf[a:z]``: 1 to 18 ASCII digits, else -1."""
    if z <= a or z - a > _MAX_DIGITS:
        return -1
    n = 0
    for i in range(a, z):
        d = buf[i] - 48
        if d < 0 or d > 9:
            return -1
        n = n * 10 + d
    return n


@njit(cache=True, nogil=True, inline="always")
def _bit(name: int) -> int:
    """The bit of a field name the decoder reads; 0 for any other."""
    if name == _K:
        return 1
    if name == _X:
        return 2
    if name == _Y:
        return 4
    if name == _P:
        return 8
    if name == _T:
        return 16
    if name == _V:
        return 32
    if name == _I:
        return 64
    return 0


@njit(cache=True, nogil=True)
def _row(
    buf: np.ndarray,
    a: int,
    z: int,
    form: int,
    o: int,
    out_a: np.ndarray,
    out_c: np.ndarray,
    out_v: np.ndarray,
) -> tuple[int, int, int]:
    """Read the instance ``buf[a:z]`` (tag and arrays) of the form ``form`` into the
    outputs from ``o`` on: ``(count, extent, classes)``, count -1 when it is not one
    kept as the service writes it (non-empty; indices, or pairs of expert and class,
    strictly ascending and non-negative; values finite and non-zero)."""
    tag, n = buf[a], z - a - 1
    if form == FORM_ATTRIBUTES:
        if tag != _A or n <= 0 or n % 12:
            return -1, 0, 0
        m = n // 12
        idx = buf[a + 1 : a + 1 + 4 * m].view(np.int32)
        val = buf[a + 1 + 4 * m : z].view(np.float64)
        previous = -1
        for j in range(m):
            i, x = int(idx[j]), float(val[j])
            if i <= previous or x == 0.0 or not np.isfinite(x):
                return -1, 0, 0
            previous = i
            out_a[o + j], out_v[o + j] = i, x
        return m, previous + 1, 0
    if tag == _E:
        if n <= 0 or n % 16:
            return -1, 0, 0
        m = n // 16
        e = buf[a + 1 : a + 1 + 4 * m].view(np.int32)
        c = buf[a + 1 + 4 * m : a + 1 + 8 * m].view(np.int32)
        v = buf[a + 1 + 8 * m : z].view(np.float64)
        pe, pc, top = -1, -1, 0
        for j in range(m):
            ej, cj, vj = int(e[j]), int(c[j]), float(v[j])
            if ej < 0 or cj < 0 or vj == 0.0 or not np.isfinite(vj):
                return -1, 0, 0
            if ej < pe or (ej == pe and cj <= pc):
                return -1, 0, 0
            pe, pc = ej, cj
            out_a[o + j], out_c[o + j], out_v[o + j] = ej, cj, vj
            if cj >= top:
                top = cj + 1
        return m, pe + 1, top
    if tag == _F:
        if n < 4:
            return -1, 0, 0
        k = int(buf[a + 1 : a + 5].view(np.int32)[0])
        if k < 1 or (n - 4) % (4 + 8 * k):
            return -1, 0, 0
        rows = (n - 4) // (4 + 8 * k)
        if rows == 0:
            return -1, 0, 0
        e = buf[a + 5 : a + 5 + 4 * rows].view(np.int32)
        v = buf[a + 5 + 4 * rows : z].view(np.float64)
        pe = -1
        for r in range(rows):
            er = int(e[r])
            if er <= pe:  # every class of each row: experts strictly ascend
                return -1, 0, 0
            pe = er
            for cj in range(k):
                j = r * k + cj
                vj = float(v[j])
                if vj == 0.0 or not np.isfinite(vj):
                    return -1, 0, 0
                out_a[o + j], out_c[o + j], out_v[o + j] = er, cj, vj
        return rows * k, pe + 1, k
    return -1, 0, 0


@njit(cache=True, nogil=True)
def read_entries(buf: np.ndarray, ends: np.ndarray, n_fields: np.ndarray) -> tuple[np.ndarray, ...]:
    """Read ``n`` log entries held in ``buf`` (uint8) as items one after another: the
    ``n`` entry ids first, then every entry's flat field list (``n_fields[t]`` items for
    entry ``t``); item ``j`` ends at ``ends[j]``.

    Returns ``(form, status, seq, y, p, served, row, ptr, a, c, v, extent, classes)``:
    the instances' form (that of the first instance read; an entry with another is
    refused) as a one-element array; per entry its status (:data:`REFUSED` or its kind),
    seq, label and prediction (-1 for none), the version that served it (-1 when it
    does not say) and its row (-1 for none); the rows of the instances of the entries
    read, row ``r`` at ``ptr[r]:ptr[r + 1]`` of ``a`` (indices or experts), ``c``
    (classes; unset for attributes) and ``v`` (values), with its extent and classes."""
    n = n_fields.size
    cap = buf.size // 8 + 1  # every value takes 8 bytes
    out_a = np.empty(cap, dtype=np.int64)
    out_c = np.zeros(cap, dtype=np.int64)
    out_v = np.empty(cap, dtype=np.float64)
    ptr = np.zeros(n + 1, dtype=np.int64)
    extent = np.zeros(n, dtype=np.int64)
    classes = np.zeros(n, dtype=np.int64)
    status = np.zeros(n, dtype=np.int8)
    seq = np.full(n, -1, dtype=np.int64)
    y = np.full(n, -1, dtype=np.int64)
    p = np.full(n, -1, dtype=np.int64)
    served = np.full(n, -1, dtype=np.int64)
    row = np.full(n, -1, dtype=np.int64)
    form = np.zeros(1, dtype=np.int64)
    rows = 0
    item = n  # the first field of entry 0
    for t in range(n):
        first, nf = item, n_fields[t]
        item += nf
        # the id: <seq>-0
        a = 0 if t == 0 else ends[t - 1]
        z = ends[t]
        if z - a < 3 or buf[z - 1] != 48 or buf[z - 2] != 45:
            continue
        s = _digits(buf, a, z - 2)
        if s < 1:
            continue
        seq[t] = s
        if nf % 2:
            continue
        # the fields: where each one the decoder reads is (a repeated one is refused)
        seen, good = 0, True
        kind_at, x_at, y_at, p_at, v_at, i_at = -1, -1, -1, -1, -1, -1
        for j in range(first, first + nf, 2):
            fa = ends[j - 1]
            if ends[j] - fa != 1:
                continue  # a name the decoder does not read
            bit = _bit(buf[fa])
            if bit == 0:
                continue
            if seen & bit:
                good = False
                break
            seen |= bit
            at = j + 1  # the value's item
            if bit == 1:
                kind_at = at
            elif bit == 2:
                x_at = at
            elif bit == 4:
                y_at = at
            elif bit == 8:
                p_at = at
            elif bit == 32:
                v_at = at
            elif bit == 64:
                i_at = at
        if not good or kind_at < 0 or ends[kind_at] - ends[kind_at - 1] != 1:
            continue
        kind = buf[ends[kind_at - 1]]
        if kind == 114:  # r
            status[t] = RESET
            continue
        if kind == 99:  # c: read by the full decoder, as rare as it is
            continue
        if kind == 110:  # n
            if i_at >= 0:
                ka, kz = ends[i_at - 1], ends[i_at]
                if kz - ka > _MAX_KEY:
                    continue
                printable = True
                for q in range(ka, kz):
                    if buf[q] < 0x21 or buf[q] > 0x7E:
                        printable = False
                        break
                if not printable:
                    continue
            st = LEARN
        elif kind == 108:  # l
            if p_at < 0 or not seen & 16:
                continue
            pv = _digits(buf, ends[p_at - 1], ends[p_at])
            if pv < 0:
                continue
            p[t] = pv
            if v_at >= 0:
                vv = _digits(buf, ends[v_at - 1], ends[v_at])
                if 0 <= vv < s:
                    served[t] = vv
            st = LABEL
        else:
            continue
        if x_at < 0 or y_at < 0:
            continue
        yv = _digits(buf, ends[y_at - 1], ends[y_at])
        if yv < 0:
            continue
        xa, xz = ends[x_at - 1], ends[x_at]
        if xz - xa < 2:
            continue
        tag = buf[xa]
        f = FORM_ATTRIBUTES if tag == _A else FORM_EXPERTS
        if form[0] == FORM_NONE:
            form[0] = f
        elif form[0] != f:
            continue
        o = ptr[rows]
        m, ext, top = _row(buf, xa, xz, f, o, out_a, out_c, out_v)
        if m < 0:
            continue
        status[t], y[t], row[t] = st, yv, rows
        extent[rows], classes[rows] = ext, top
        ptr[rows + 1] = o + m
        rows += 1
    end = ptr[rows]
    return (
        form,
        status,
        seq,
        y,
        p,
        served,
        row,
        ptr[: rows + 1].copy(),
        out_a[:end].copy(),
        out_c[:end].copy(),
        out_v[:end].copy(),
        extent[:rows].copy(),
        classes[:rows].copy(),
    )
