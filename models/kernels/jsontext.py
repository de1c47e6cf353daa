"""Compiled readers of JSON text (numba, cached on disk): the lexer, and the readers of an
instance's payload from its text (the votes of an ``experts`` object, the values of a
``features`` object), for the payloads the service reads thousands of times a second.
The request bodies around them are read by :mod:`app.core.jsontext`, on this lexer.

They read a strict subset of JSON: ASCII text, strings without escapes, integers of at
most 18 digits and numbers whose decimal mantissa and exponent allow an exact conversion
(Clinger's fast path: a mantissa below 2**53 and a power of ten up to 22, so one IEEE
multiplication or division gives the correctly rounded double). Anything else, valid JSON
or not, is *refused*: the caller then reads the text with a full JSON parser, which
answers it exactly as before. So whatever these readers accept, a full parser reads to
the same document.

Every reader works on a ``uint8`` array and returns a status first; a negative status is a
refusal.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from models.kernels.instances import close_row, vote_rows

__all__ = [
    "KIND_ARRAY",
    "KIND_FALSE",
    "KIND_FLOAT",
    "KIND_INT",
    "KIND_NULL",
    "KIND_OBJECT",
    "KIND_STRING",
    "KIND_TRUE",
    "MAX_DEPTH",
    "REFUSED",
    "SCAN",
    "UNCOUNTED",
    "literal",
    "member_key",
    "read_feature_row",
    "read_features",
    "read_vote_row",
    "read_vote_rows",
    "read_votes",
    "skip_ws",
    "value_end",
]

KIND_STRING, KIND_INT, KIND_FLOAT, KIND_OBJECT = 0, 1, 2, 3
KIND_ARRAY, KIND_TRUE, KIND_FALSE, KIND_NULL = 4, 5, 6, 7
MAX_DEPTH = 32  # deeper nesting is refused
SCAN = 32  # a name is looked for this many places on from where it is expected, no further
# scores held for the votes of some objects without counting their members first (beyond,
# the votes are counted, so a long text of few votes takes little memory)
UNCOUNTED = 1 << 14
REFUSED = -1

# exact powers of ten: every one up to 1e22 is a double
_POW10 = np.array([float(10**i) for i in range(23)])
_MANTISSA = 2**53
_QUOTE, _BACKSLASH, _COLON, _COMMA = 34, 92, 58, 44
_LBRACE, _RBRACE, _LBRACKET, _RBRACKET = 123, 125, 91, 93
_MINUS, _PLUS, _DOT, _ZERO, _NINE = 45, 43, 46, 48, 57
_TRUE = np.frombuffer(b"true", dtype=np.uint8)
_FALSE = np.frombuffer(b"false", dtype=np.uint8)
_NULL = np.frombuffer(b"null", dtype=np.uint8)


@njit(cache=True, nogil=True, inline="always")
def skip_ws(b: np.ndarray, i: int, end: int) -> int:
    """The position of the first non-whitespace byte at or after ``i``."""
    while i < end:
        c = b[i]
        if c != 32 and c != 10 and c != 13 and c != 9:
            return i
        i += 1
    return i


@njit(cache=True, nogil=True, inline="always")
def _string(b: np.ndarray, i: int, end: int) -> int:
    """The position just past the string opening at ``i``; REFUSED for an escape, a
    control or non-ASCII byte, or no closing quote."""
    i += 1
    while i < end:
        c = b[i]
        if c == _QUOTE:
            return i + 1
        if c == _BACKSLASH or c < 32 or c >= 128:
            return REFUSED
        i += 1
    return REFUSED


@njit(cache=True, nogil=True, inline="always")
def _lexeme(b: np.ndarray, i: int, end: int) -> tuple[int, int, int, int, bool]:
    """``(end, kind, mantissa, exponent, negative)`` of the number at ``i``: its value is
    ``mantissa`` times ten to ``exponent``, negated with ``negative``. End REFUSED when
    it is not one this reader converts exactly."""
    negative = False
    if i < end and b[i] == _MINUS:
        negative = True
        i += 1
    if i >= end or not _ZERO <= b[i] <= _NINE:
        return REFUSED, KIND_INT, 0, 0, negative
    mantissa, digits, exponent = 0, 0, 0
    if b[i] == _ZERO:
        i += 1
        if i < end and _ZERO <= b[i] <= _NINE:  # a leading zero
            return REFUSED, KIND_INT, 0, 0, negative
    else:
        while i < end and _ZERO <= b[i] <= _NINE:
            if digits < 19:
                mantissa = mantissa * 10 + (b[i] - _ZERO)
            digits += 1
            i += 1
    kind = KIND_INT
    if i < end and b[i] == _DOT:
        kind = KIND_FLOAT
        i += 1
        if i >= end or not _ZERO <= b[i] <= _NINE:
            return REFUSED, kind, 0, 0, negative
        while i < end and _ZERO <= b[i] <= _NINE:
            if mantissa == 0 and b[i] == _ZERO:
                exponent -= 1  # leading zeros of the fraction add no digit
            else:
                if digits < 19:
                    mantissa = mantissa * 10 + (b[i] - _ZERO)
                digits += 1
                exponent -= 1
            i += 1
    if i < end and (b[i] == 101 or b[i] == 69):  # e or E
        kind = KIND_FLOAT
        i += 1
        sign = 1
        if i < end and (b[i] == _MINUS or b[i] == _PLUS):
            sign = -1 if b[i] == _MINUS else 1
            i += 1
        if i >= end or not _ZERO <= b[i] <= _NINE:
            return REFUSED, kind, 0, 0, negative
        e = 0
        while i < end and _ZERO <= b[i] <= _NINE:
            if e < 10_000:
                e = e * 10 + (b[i] - _ZERO)
            i += 1
        exponent += sign * e
    if kind == KIND_INT:
        return (REFUSED if digits > 18 else i), kind, mantissa, 0, negative
    if digits > 15 or mantissa >= _MANTISSA:
        return REFUSED, kind, 0, 0, negative
    if mantissa == 0:
        exponent = 0
    elif exponent < -22 or exponent > 22:
        return REFUSED, kind, 0, 0, negative
    return i, kind, mantissa, exponent, negative


@njit(cache=True, nogil=True, inline="always")
def _number(b: np.ndarray, i: int, end: int) -> tuple[int, int, float]:
    """``(end, kind, value)`` of the number at ``i``; end REFUSED when it is not one
    this reader converts exactly."""
    i, kind, mantissa, exponent, negative = _lexeme(b, i, end)
    if i < 0:
        return REFUSED, kind, 0.0
    if kind == KIND_INT:
        value = float(mantissa)  # -0 is the integer 0
        return i, kind, -value if negative and mantissa != 0 else value
    value = mantissa / _POW10[-exponent] if exponent < 0 else mantissa * _POW10[exponent]
    return i, kind, -value if negative else value


@njit(cache=True, nogil=True, inline="always")
def literal(b: np.ndarray, i: int, end: int, word: np.ndarray) -> int:
    n = word.size
    if i + n > end:
        return REFUSED
    for j in range(n):
        if b[i + j] != word[j]:
            return REFUSED
    return i + n


@njit(cache=True, nogil=True, inline="always")
def _scalar(b: np.ndarray, i: int, end: int) -> tuple[int, int]:
    """``(end, kind)`` of the string, number, true, false or null at ``i``; end REFUSED
    when there is none there."""
    c = b[i] if i < end else 0
    if c == _QUOTE:
        return _string(b, i, end), KIND_STRING
    if c == _MINUS or _ZERO <= c <= _NINE:
        j, kind, _, _, _ = _lexeme(b, i, end)
        return j, kind
    if c == 116:
        return literal(b, i, end, _TRUE), KIND_TRUE
    if c == 102:
        return literal(b, i, end, _FALSE), KIND_FALSE
    if c == 110:
        return literal(b, i, end, _NULL), KIND_NULL
    return REFUSED, KIND_NULL


@njit(cache=True, nogil=True, inline="always")
def member_key(b: np.ndarray, i: int, end: int) -> tuple[int, int, int]:
    """``(k0, k1, v0)`` of the member whose key opens at ``i``: the key at ``b[k0:k1]``
    without its quotes, the value at ``v0`` (past the colon and whitespace); ``v0``
    REFUSED when no key and colon are there."""
    if i >= end or b[i] != _QUOTE:
        return 0, 0, REFUSED
    k0 = i + 1
    i = _string(b, i, end)
    if i < 0:
        return 0, 0, REFUSED
    k1 = i - 1
    i = skip_ws(b, i, end)
    if i >= end or b[i] != _COLON:
        return 0, 0, REFUSED
    return k0, k1, skip_ws(b, i + 1, end)


@njit(cache=True, nogil=True, inline="always")
def _key(b: np.ndarray, i: int, end: int) -> int:
    """The position of the value of the member whose key opens at ``i`` (past the key,
    the colon and whitespace); REFUSED when no key and colon are there."""
    return member_key(b, i, end)[2]


@njit(cache=True, nogil=True)
def value_end(b: np.ndarray, i: int, end: int) -> tuple[int, int]:
    """``(end, kind)`` of the value at ``i`` (``i`` at its first byte), checked through
    all its nesting; end REFUSED when it is not read."""
    c = b[i] if i < end else 0
    if c != _LBRACE and c != _LBRACKET:
        return _scalar(b, i, end)
    kind = KIND_OBJECT if c == _LBRACE else KIND_ARRAY
    # containers, without recursion: the open ones' closing bytes on a stack
    stack = np.empty(MAX_DEPTH, dtype=np.uint8)
    depth = 0
    while True:
        if i < 0 or i >= end:
            return REFUSED, kind
        c = b[i]
        if c in (_LBRACE, _LBRACKET):
            if depth == MAX_DEPTH:
                return REFUSED, kind
            stack[depth] = _RBRACE if c == _LBRACE else _RBRACKET
            depth += 1
            i = skip_ws(b, i + 1, end)
            if i < end and b[i] == stack[depth - 1]:  # empty
                depth -= 1
                i += 1
            elif stack[depth - 1] == _RBRACE:
                i = _key(b, i, end)
                continue  # at the member's value
            else:
                continue  # at the first element
        else:
            i, _ = _scalar(b, i, end)
            if i < 0:
                return REFUSED, kind
        # after a value inside the open containers: a comma or closing bytes
        while depth > 0:
            i = skip_ws(b, i, end)
            if i >= end:
                return REFUSED, kind
            if b[i] == stack[depth - 1]:
                depth -= 1
                i += 1
                continue
            if b[i] != _COMMA:
                return REFUSED, kind
            i = skip_ws(b, i + 1, end)
            if stack[depth - 1] == _RBRACE:
                i = _key(b, i, end)
            if i < 0 or i >= end:
                return REFUSED, kind
            break
        if depth == 0:
            return i, kind


@njit(cache=True, nogil=True, inline="always")
def _find(b: np.ndarray, a: int, z: int, blob: np.ndarray, ptr: np.ndarray, guess: int) -> int:
    """The index of the name ``b[a:z]`` among those ``blob[ptr[j]:ptr[j + 1]]``, tried
    at the SCAN places from ``guess`` on (names usually come in order, and the search
    stays short whatever the order); -1 when it is none of them."""
    count = ptr.size - 1
    n = z - a
    for step in range(min(count, SCAN)):
        j = guess + step
        if j >= count:
            j -= count
        lo = ptr[j]
        if ptr[j + 1] - lo != n:
            continue
        same = True
        for t in range(n):
            if blob[lo + t] != b[a + t]:
                same = False
                break
        if same:
            return j
    return -1


@njit(cache=True, nogil=True)
def _count(b: np.ndarray, i: int, end: int) -> int:
    """The members of the object at ``i``, in text :func:`_value` has read."""
    i = skip_ws(b, i, end)
    if i >= end or b[i] != _LBRACE:
        return 0
    depth, n, empty = 0, 0, True
    while i < end:
        c = b[i]
        if c == _QUOTE:
            i = _string(b, i, end)
            if i < 0:
                return n
            if depth == 1 and empty:
                n, empty = n + 1, False
            continue
        if c in (_LBRACE, _LBRACKET):
            depth += 1
        elif c in (_RBRACE, _RBRACKET):
            depth -= 1
            if depth == 0:
                return n
        elif c == _COMMA and depth == 1:
            empty = True
        i += 1
    return n


@njit(cache=True, nogil=True)
def _member(
    b: np.ndarray,
    i: int,
    end: int,
    blob: np.ndarray,
    ptr: np.ndarray,
    guess: int,
    last: np.ndarray,
    mark: int,
) -> tuple[int, int]:
    """``(at, j)`` of the member whose key opens at ``i``: its value starts at ``at``, its
    key is name ``j`` of ``blob`` (see :func:`_find`), and ``last[j]`` becomes ``mark``;
    ``at`` REFUSED when it is none, or when ``last[j]`` was ``mark`` already (the name
    came twice in the object ``mark`` stands for)."""
    a = i + 1
    i = _string(b, i, end)
    if i < 0:
        return REFUSED, -1
    j = _find(b, a, i - 1, blob, ptr, guess)
    if j < 0 or last[j] == mark:
        return REFUSED, -1
    last[j] = mark
    return skip_ws(b, skip_ws(b, i, end) + 1, end), j  # past the colon


@njit(cache=True, nogil=True, inline="always")
def _score(b: np.ndarray, i: int, end: int) -> tuple[int, float]:
    """``(end, value)`` of the number at ``i``; end REFUSED when there is none or it is
    not converted exactly."""
    if i >= end or (b[i] != _MINUS and not _ZERO <= b[i] <= _NINE):
        return REFUSED, 0.0
    i, _, value = _number(b, i, end)
    return i, value


@njit(cache=True, nogil=True)
def read_vote_rows(
    b: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    names: np.ndarray,
    names_ptr: np.ndarray,
    index: np.ndarray,
    keys: np.ndarray,
    keys_ptr: np.ndarray,
    k: int,
    int_labels: bool,
) -> tuple[
    int,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
]:
    """``(n, e, c, v, ptr, sizes, classes, low, high)``: the votes :func:`read_votes`
    reads, name ``j`` standing for expert ``index[j]``, as
    :func:`models.kernels.instances.vote_rows` gives their instances, in one call; ``n``
    the votes, or REFUSED (then the arrays are empty)."""
    n, expert, row, scores = read_votes(
        b, starts, ends, names, names_ptr, keys, keys_ptr, k, int_labels
    )
    if n < 0:
        none = np.zeros(0, dtype=np.int64)
        nothing = np.zeros(0)
        return n, none, none, nothing, none, none, none, nothing, nothing
    e, c, v, ptr, sizes, classes, low, high = vote_rows(
        row[:n], index[expert[:n]], scores[:n], starts.size
    )
    return n, e, c, v, ptr, sizes, classes, low, high


@njit(cache=True, nogil=True)
def read_vote_row(
    b: np.ndarray,
    start: int,
    end: int,
    names: np.ndarray,
    names_ptr: np.ndarray,
    index: np.ndarray,
    keys: np.ndarray,
    keys_ptr: np.ndarray,
    k: int,
    int_labels: bool,
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, int, int, float, float]:
    """``(n, e, c, v, size, classes, low, high)``: :func:`read_vote_rows` of the one
    object ``b[start:end]``, its row as the arrays and its extent, classes and value range
    as numbers (a lone request's instance: three arrays to hand back, not eight)."""
    n, e, c, v, _, sizes, classes, low, high = read_vote_rows(
        b,
        np.full(1, start, dtype=np.int64),
        np.full(1, end, dtype=np.int64),
        names,
        names_ptr,
        index,
        keys,
        keys_ptr,
        k,
        int_labels,
    )
    if n < 0:
        return n, e, c, v, 0, 0, 0.0, 0.0
    return n, e, c, v, sizes[0], classes[0], low[0], high[0]


@njit(cache=True, nogil=True)
def read_votes(
    b: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    names: np.ndarray,
    names_ptr: np.ndarray,
    keys: np.ndarray,
    keys_ptr: np.ndarray,
    k: int,
    int_labels: bool,
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """``(n, expert, row, scores)``: the ``n`` votes of the ``experts`` objects
    ``b[starts[t]:ends[t]]``, text :func:`members` has read, in the first ``n`` rows of
    the arrays (which may hold more), as :func:`models.inputs.batch.expert_votes` reads
    them: vote ``j`` is expert ``expert[j]`` (its index among ``names``) in object
    ``row[j]``, scoring the classes ``scores[j]`` (a label's class is its index among
    ``keys``).

    Every vote must be a ``{label: number}`` object, a list of ``k`` numbers or a label:
    a string, or with ``int_labels`` an integer, written as its key. ``n`` is REFUSED for
    anything else: an unknown expert or label (or one more than SCAN places on from the
    one expected next), one given twice in an object, an empty vote or an empty object, a
    number this module does not convert."""
    count = names_ptr.size - 1
    most = starts.size * count  # an expert votes at most once in an object
    if most * k > UNCOUNTED:  # bounded by the members sent instead
        most = 0
        for t in range(starts.size):
            most += _count(b, starts[t], ends[t])
    expert = np.empty(most, dtype=np.int64)
    row = np.empty(most, dtype=np.int64)
    scores = np.zeros((most, k))
    seen = np.full(count, -1, dtype=np.int64)  # the last object each expert voted in
    hit = np.full(k, -1, dtype=np.int64)  # the last vote that scored each class
    n = 0
    for t in range(starts.size):
        end = ends[t]
        i = skip_ws(b, starts[t], end) + 1  # past the object's brace
        i = skip_ws(b, i, end)
        if i >= end or b[i] == _RBRACE:
            return REFUSED, expert, row, scores
        guess = 0
        while True:
            i, e = _member(b, i, end, names, names_ptr, guess, seen, t)
            if i < 0:
                return REFUSED, expert, row, scores
            guess = e + 1
            c = b[i]
            if c == _LBRACE:
                i = skip_ws(b, i + 1, end)
                if b[i] == _RBRACE:
                    return REFUSED, expert, row, scores
                label = 0
                while True:
                    i, cls = _member(b, i, end, keys, keys_ptr, label, hit, n)
                    if i < 0:
                        return REFUSED, expert, row, scores
                    label = cls + 1
                    i, value = _score(b, i, end)
                    if i < 0:
                        return REFUSED, expert, row, scores
                    scores[n, cls] = value
                    i = skip_ws(b, i, end)
                    if b[i] == _RBRACE:
                        i += 1
                        break
                    i = skip_ws(b, i + 1, end)  # past the comma
            elif c == _LBRACKET:
                i = skip_ws(b, i + 1, end)
                j = 0
                while True:
                    i, value = _score(b, i, end)
                    if j == k or i < 0:
                        return REFUSED, expert, row, scores
                    scores[n, j] = value
                    j += 1
                    i = skip_ws(b, i, end)
                    if b[i] == _RBRACKET:
                        i += 1
                        break
                    i = skip_ws(b, i + 1, end)
                if j != k:
                    return REFUSED, expert, row, scores
            elif c == _QUOTE or (int_labels and (c == _MINUS or _ZERO <= c <= _NINE)):  # a label
                a = i + 1 if c == _QUOTE else i
                i = _string(b, i, end) if c == _QUOTE else _number(b, i, end)[0]
                if i < 0:
                    return REFUSED, expert, row, scores
                cls = _find(b, a, i - 1 if c == _QUOTE else i, keys, keys_ptr, 0)
                if cls < 0:
                    return REFUSED, expert, row, scores
                scores[n, cls] = 1.0
            else:
                return REFUSED, expert, row, scores
            expert[n], row[n] = e, t
            n += 1
            i = skip_ws(b, i, end)
            if b[i] == _RBRACE:
                break
            i = skip_ws(b, i + 1, end)  # past the comma
    return n, expert, row, scores


@njit(cache=True, nogil=True)
def read_features(
    b: np.ndarray, starts: np.ndarray, ends: np.ndarray, d: int, constant: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(ok, idx, val, ptr, size, low, high)``: the objects ``{"<index>": number, ...}``
    at ``b[starts[t]:ends[t]]`` (text :func:`members` has read) as
    :func:`~models.kernels.instances.sparse_rows` gives their pairs: features ``0..d-1``
    sorted, zeros dropped, then the constant at ``d`` if ``constant``; row ``t`` at
    ``ptr[t]:ptr[t + 1]``, with its extent and value range. ``ok[t]`` is false, and row
    ``t`` empty, when object ``t`` is refused: a key that is not 1 to 18 ASCII digits, an
    index not below ``d`` or given twice, a value that is not a number read exactly."""
    n = starts.size
    ok = np.zeros(n, dtype=np.bool_)
    ptr = np.zeros(n + 1, dtype=np.int64)
    size = np.zeros(n, dtype=np.int64)
    low = np.zeros(n)
    high = np.zeros(n)
    room = 0
    for t in range(n):  # a member takes at least 6 bytes: "0":0,
        room += (ends[t] - starts[t]) // 6 + 2  # and the constant
    idx = np.empty(room, dtype=np.int64)
    val = np.empty(room, dtype=np.float64)
    w = 0
    for t in range(n):
        end, first, good, ascending = ends[t], w, True, True
        i = skip_ws(b, starts[t], end)
        if i >= end or b[i] != _LBRACE:
            ptr[t + 1] = w
            continue
        i = skip_ws(b, i + 1, end)
        empty = i < end and b[i] == _RBRACE
        while good and not empty:
            if i >= end or b[i] != _QUOTE:
                good = False
                break
            i += 1
            index, digits = 0, 0
            while i < end and _ZERO <= b[i] <= _NINE and digits < 19:
                index = index * 10 + (b[i] - _ZERO)
                digits += 1
                i += 1
            if digits == 0 or digits > 18 or index >= d or i >= end or b[i] != _QUOTE:
                good = False
                break
            i = skip_ws(b, i + 1, end)
            if i >= end or b[i] != _COLON:
                good = False
                break
            i, x = _score(b, skip_ws(b, i + 1, end), end)
            if i < 0 or w == room:
                good = False
                break
            if w > first and index <= idx[w - 1]:
                ascending = False
            idx[w], val[w] = index, x
            w += 1
            i = skip_ws(b, i, end)
            if i < end and b[i] == _COMMA:
                i = skip_ws(b, i + 1, end)
            elif i < end and b[i] == _RBRACE:
                break
            else:
                good = False
        if good and not ascending:  # in order, and an index given twice is refused
            order = np.argsort(idx[first:w], kind="mergesort")
            idx[first:w], val[first:w] = idx[first:w][order], val[first:w][order]
            for j in range(first + 1, w):
                if idx[j] == idx[j - 1]:
                    good = False
                    break
        if not good:
            w = first
            ptr[t + 1] = w
            continue
        ok[t] = True
        kept = first
        for j in range(first, w):  # zeros dropped
            if val[j] != 0.0:
                idx[kept], val[kept] = idx[j], val[j]
                kept += 1
        w = close_row(idx, val, first, kept, d, constant, t, size, low, high)
        ptr[t + 1] = w
    return ok, idx[:w], val[:w], ptr, size, low, high


@njit(cache=True, nogil=True)
def read_feature_row(
    b: np.ndarray, start: int, end: int, d: int, constant: bool
) -> tuple[bool, np.ndarray, np.ndarray, int, float, float]:
    """``(ok, idx, val, size, low, high)``: :func:`read_features` of the one object
    ``b[start:end]``, its row as two arrays and the rest as numbers."""
    ok, idx, val, _, size, low, high = read_features(
        b, np.full(1, start, dtype=np.int64), np.full(1, end, dtype=np.int64), d, constant
    )
    return ok[0], idx, val, size[0], low[0], high[0]
