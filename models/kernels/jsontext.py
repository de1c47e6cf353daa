"""Compiled readers of JSON text (numba, cached on disk), for the request bodies the
service reads thousands of times a second.

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
    "FORM_EXPERTS",
    "FORM_FEATURES",
    "KIND_ARRAY",
    "KIND_FALSE",
    "KIND_FLOAT",
    "KIND_INT",
    "KIND_NULL",
    "KIND_OBJECT",
    "KIND_STRING",
    "KIND_TRUE",
    "MAX_DEPTH",
    "MAX_MEMBERS",
    "SCAN",
    "UNCOUNTED",
    "batch_members",
    "members",
    "read_feature_row",
    "read_features",
    "read_vote_row",
    "read_vote_rows",
    "read_votes",
    "trial_members",
]

KIND_STRING, KIND_INT, KIND_FLOAT, KIND_OBJECT = 0, 1, 2, 3
KIND_ARRAY, KIND_TRUE, KIND_FALSE, KIND_NULL = 4, 5, 6, 7
MAX_DEPTH = 32  # deeper nesting is refused
MAX_MEMBERS = 8  # members: an object of more is refused (a trial body has at most 5)
SCAN = 32  # a name is looked for this many places on from where it is expected, no further
# scores held for the votes of some objects without counting their members first (beyond,
# the votes are counted, so a long text of few votes takes little memory)
UNCOUNTED = 1 << 14
REFUSED = -1
# what an instance alone is, as trial_members finds it: {"experts": {...}} or {"features": {...}}
FORM_EXPERTS, FORM_FEATURES = 0, 1

# exact powers of ten: every one up to 1e22 is a double
_POW10 = np.array([float(10**i) for i in range(23)])
_MANTISSA = 2**53
_QUOTE, _BACKSLASH, _COLON, _COMMA = 34, 92, 58, 44
_LBRACE, _RBRACE, _LBRACKET, _RBRACKET = 123, 125, 91, 93
_MINUS, _PLUS, _DOT, _ZERO, _NINE = 45, 43, 46, 48, 57
_TRUE = np.frombuffer(b"true", dtype=np.uint8)
_FALSE = np.frombuffer(b"false", dtype=np.uint8)
_NULL = np.frombuffer(b"null", dtype=np.uint8)
_INSTANCE = np.frombuffer(b"instance", dtype=np.uint8)
_EXPERTS = np.frombuffer(b"experts", dtype=np.uint8)
_FEATURES = np.frombuffer(b"features", dtype=np.uint8)
_ITEMS = np.frombuffer(b"items", dtype=np.uint8)


@njit(cache=True, nogil=True, inline="always")
def _ws(b: np.ndarray, i: int, end: int) -> int:
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
def _literal(b: np.ndarray, i: int, end: int, word: np.ndarray) -> int:
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
        return _literal(b, i, end, _TRUE), KIND_TRUE
    if c == 102:
        return _literal(b, i, end, _FALSE), KIND_FALSE
    if c == 110:
        return _literal(b, i, end, _NULL), KIND_NULL
    return REFUSED, KIND_NULL


@njit(cache=True, nogil=True, inline="always")
def _member_key(b: np.ndarray, i: int, end: int) -> tuple[int, int, int]:
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
    i = _ws(b, i, end)
    if i >= end or b[i] != _COLON:
        return 0, 0, REFUSED
    return k0, k1, _ws(b, i + 1, end)


@njit(cache=True, nogil=True, inline="always")
def _key(b: np.ndarray, i: int, end: int) -> int:
    """The position of the value of the member whose key opens at ``i`` (past the key,
    the colon and whitespace); REFUSED when no key and colon are there."""
    return _member_key(b, i, end)[2]


@njit(cache=True, nogil=True)
def _value(b: np.ndarray, i: int, end: int) -> tuple[int, int]:
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
            i = _ws(b, i + 1, end)
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
            i = _ws(b, i, end)
            if i >= end:
                return REFUSED, kind
            if b[i] == stack[depth - 1]:
                depth -= 1
                i += 1
                continue
            if b[i] != _COMMA:
                return REFUSED, kind
            i = _ws(b, i + 1, end)
            if stack[depth - 1] == _RBRACE:
                i = _key(b, i, end)
            if i < 0 or i >= end:
                return REFUSED, kind
            break
        if depth == 0:
            return i, kind


@njit(cache=True, nogil=True, inline="always")
def _named(b: np.ndarray, spans: np.ndarray, n: int, k0: int, k1: int) -> bool:
    """Whether one of the first ``n`` members in ``spans`` has the key ``b[k0:k1]``."""
    for j in range(n):
        if spans[j, 1] - spans[j, 0] == k1 - k0:
            same = True
            for t in range(k1 - k0):
                if b[spans[j, 0] + t] != b[k0 + t]:
                    same = False
                    break
            if same:
                return True
    return False


@njit(cache=True, nogil=True, inline="always")
def _after_member(b: np.ndarray, v1: int, end: int) -> tuple[int, bool]:
    """``(i, more)`` after a member's value ending at ``v1``: the next member's key at
    ``i`` (``more``), or ``i`` just past the object's closing brace; ``i`` REFUSED when
    neither a comma nor the brace follows."""
    i = _ws(b, v1, end)
    if i < end and b[i] == _COMMA:
        return _ws(b, i + 1, end), True
    if i < end and b[i] == _RBRACE:
        return i + 1, False
    return REFUSED, False


@njit(cache=True, nogil=True)
def _object(b: np.ndarray, start: int, end: int) -> tuple[int, int, np.ndarray]:
    """``(n, i, spans)``: :func:`members` of the object at ``b[start:end]``, and ``i``
    just past its closing brace."""
    spans = np.empty((MAX_MEMBERS, 5), dtype=np.int64)
    i = _ws(b, start, end)
    if i >= end or b[i] != _LBRACE:
        return REFUSED, i, spans
    i = _ws(b, i + 1, end)
    if i < end and b[i] == _RBRACE:
        return 0, i + 1, spans
    n, more = 0, True
    while more:
        k0, k1, v0 = _member_key(b, i, end)
        if v0 < 0:
            return REFUSED, i, spans
        v1, kind = _value(b, v0, end)
        # a key given twice, or more than MAX_MEMBERS (so the check for keys given twice
        # stays short)
        if v1 < 0 or _named(b, spans, n, k0, k1) or n == MAX_MEMBERS:
            return REFUSED, i, spans
        spans[n, 0], spans[n, 1], spans[n, 2], spans[n, 3], spans[n, 4] = k0, k1, v0, v1, kind
        n += 1
        i, more = _after_member(b, v1, end)
        if i < 0:
            return REFUSED, i, spans
    return n, i, spans


@njit(cache=True, nogil=True)
def members(b: np.ndarray, start: int, end: int, whole: bool) -> tuple[int, np.ndarray]:
    """``(n, spans)``: the members of the object at ``b[start:end]`` (after whitespace),
    each checked through all its nesting: row ``j < n`` of ``spans`` is (key start, key
    end, value start, value end, value kind), the key without its quotes. With ``whole``
    nothing but whitespace may follow the object. ``n`` is REFUSED when the text is not read, a key
    comes twice, or there are more than MAX_MEMBERS (so the check for keys given twice
    stays short)."""
    n, i, spans = _object(b, start, end)
    if n >= 0 and whole and _ws(b, i, end) != end:
        return REFUSED, spans
    return n, spans


@njit(cache=True, nogil=True)
def _is(b: np.ndarray, a: int, z: int, word: np.ndarray) -> bool:
    """Whether ``b[a:z]`` is ``word``."""
    return z - a == word.size and _literal(b, a, z, word) == z


@njit(cache=True, nogil=True)
def _trial(b: np.ndarray, start: int, end: int) -> tuple[int, int, np.ndarray, int, int, int]:
    """``(n, i, spans, e0, e1, form)``: :func:`_object` of a trial's object, whose member
    ``instance``, when an object, is read as its members on the way (one pass over its
    text): ``b[e0:e1]`` the object ``v`` when it is ``{"experts": v}`` alone
    (FORM_EXPERTS) or ``{"features": v}`` alone (FORM_FEATURES), else (-1, -1, -1). An
    instance :func:`members` refuses (a key twice, more than MAX_MEMBERS) refuses the
    trial."""
    spans = np.empty((MAX_MEMBERS, 5), dtype=np.int64)
    e0, e1, form = -1, -1, -1
    i = _ws(b, start, end)
    if i >= end or b[i] != _LBRACE:
        return REFUSED, i, spans, e0, e1, form
    i = _ws(b, i + 1, end)
    if i < end and b[i] == _RBRACE:
        return 0, i + 1, spans, e0, e1, form
    n, more = 0, True
    while more:
        k0, k1, v0 = _member_key(b, i, end)
        if v0 < 0:
            return REFUSED, i, spans, e0, e1, form
        if v0 < end and b[v0] == _LBRACE and _is(b, k0, k1, _INSTANCE):
            m, v1, inner = _object(b, v0, end)
            kind = KIND_OBJECT
            if m < 0:
                v1 = REFUSED
            elif m == 1 and inner[0, 4] == KIND_OBJECT:
                if _is(b, inner[0, 0], inner[0, 1], _EXPERTS):
                    e0, e1, form = inner[0, 2], inner[0, 3], FORM_EXPERTS
                elif _is(b, inner[0, 0], inner[0, 1], _FEATURES):
                    e0, e1, form = inner[0, 2], inner[0, 3], FORM_FEATURES
        else:
            v1, kind = _value(b, v0, end)
        if v1 < 0 or _named(b, spans, n, k0, k1) or n == MAX_MEMBERS:
            return REFUSED, i, spans, e0, e1, form
        spans[n, 0], spans[n, 1], spans[n, 2], spans[n, 3], spans[n, 4] = k0, k1, v0, v1, kind
        n += 1
        i, more = _after_member(b, v1, end)
        if i < 0:
            return REFUSED, i, spans, e0, e1, form
    return n, i, spans, e0, e1, form


@njit(cache=True, nogil=True)
def trial_members(b: np.ndarray) -> tuple[int, np.ndarray, int, int, int]:
    """``(n, spans, start, end, form)``: the members of the object ``b`` as
    :func:`members` finds them, and ``b[start:end]`` the object ``v`` when member
    ``instance`` is ``{"experts": v}`` or ``{"features": v}`` alone, ``form`` saying
    which (else -1, -1, -1)."""
    n, i, spans, start, end, form = _trial(b, 0, b.size)
    if n >= 0 and _ws(b, i, b.size) != b.size:
        n = REFUSED
    return n, spans, start, end, form


@njit(cache=True, nogil=True)
def _grown(a: np.ndarray, room: int) -> np.ndarray:
    """``a`` in an array of ``room`` rows, its own first."""
    out = np.empty((room, *a.shape[1:]), dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


@njit(cache=True, nogil=True)
def batch_members(
    b: np.ndarray, most: int
) -> tuple[int, np.ndarray, int, np.ndarray, np.ndarray, np.ndarray]:
    """``(n, spans, m, counts, rows, instances)``: the members of the object ``b`` as
    :func:`members` finds them and, when one is ``items``, an array of objects, its ``m``
    elements: element ``t`` has ``counts[t]`` members ``rows[t, :counts[t]]`` (rows as
    ``spans``), and ``instances[t]`` is (start, end, form) of its instance's ``experts``
    or ``features`` object as :func:`trial_members` finds it. Each element is read as
    :func:`trial_members` reads a trial, in the one pass over the text. ``m`` is REFUSED
    (and then ``n`` too when it is not known) when no member ``items`` is an array, an
    element is not an object or one that :func:`trial_members` refuses, or there are more
    than ``most`` elements (the rows take a few hundred bytes each)."""
    end = b.size
    spans = np.empty((MAX_MEMBERS, 5), dtype=np.int64)
    room = 16
    counts = np.empty(room, dtype=np.int64)
    rows = np.empty((room, MAX_MEMBERS, 5), dtype=np.int64)
    instances = np.empty((room, 3), dtype=np.int64)
    m = REFUSED  # elements of the member items, once it is read
    i = _ws(b, 0, end)
    if i >= end or b[i] != _LBRACE:
        return REFUSED, spans, REFUSED, counts[:0], rows[:0], instances[:0]
    i = _ws(b, i + 1, end)
    n, more = 0, True
    if i < end and b[i] == _RBRACE:
        i, more = i + 1, False
    while more:
        k0, k1, v0 = _member_key(b, i, end)
        if v0 < 0:
            return REFUSED, spans, REFUSED, counts[:0], rows[:0], instances[:0]
        if v0 < end and b[v0] == _LBRACKET and _is(b, k0, k1, _ITEMS):
            kind = KIND_ARRAY
            m = 0
            v1 = _ws(b, v0 + 1, end)
            if v1 < end and b[v1] == _RBRACKET:
                v1 += 1
            else:
                while True:  # the elements: objects, each a trial
                    if v1 >= end or b[v1] != _LBRACE or m == most:
                        return REFUSED, spans, REFUSED, counts[:0], rows[:0], instances[:0]
                    k, v1, inner, e0, e1, form = _trial(b, v1, end)
                    if k < 0:
                        return REFUSED, spans, REFUSED, counts[:0], rows[:0], instances[:0]
                    if m == room:
                        room *= 2
                        counts, rows, instances = (
                            _grown(counts, room),
                            _grown(rows, room),
                            _grown(instances, room),
                        )
                    counts[m] = k
                    rows[m, :k] = inner[:k]
                    instances[m, 0], instances[m, 1], instances[m, 2] = e0, e1, form
                    m += 1
                    v1 = _ws(b, v1, end)
                    if v1 < end and b[v1] == _COMMA:
                        v1 = _ws(b, v1 + 1, end)
                        continue
                    if v1 < end and b[v1] == _RBRACKET:
                        v1 += 1
                        break
                    return REFUSED, spans, REFUSED, counts[:0], rows[:0], instances[:0]
        else:
            v1, kind = _value(b, v0, end)
        if v1 < 0 or _named(b, spans, n, k0, k1) or n == MAX_MEMBERS:
            return REFUSED, spans, REFUSED, counts[:0], rows[:0], instances[:0]
        spans[n, 0], spans[n, 1], spans[n, 2], spans[n, 3], spans[n, 4] = k0, k1, v0, v1, kind
        n += 1
        i, more = _after_member(b, v1, end)
        if i < 0:
            return REFUSED, spans, REFUSED, counts[:0], rows[:0], instances[:0]
    if _ws(b, i, end) != end:
        return REFUSED, spans, REFUSED, counts[:0], rows[:0], instances[:0]
    return n, spans, m, counts[:m], rows[:m], instances[:m]


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
    i = _ws(b, i, end)
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
    return _ws(b, _ws(b, i, end) + 1, end), j  # past the colon


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
        i = _ws(b, starts[t], end) + 1  # past the object's brace
        i = _ws(b, i, end)
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
                i = _ws(b, i + 1, end)
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
                    i = _ws(b, i, end)
                    if b[i] == _RBRACE:
                        i += 1
                        break
                    i = _ws(b, i + 1, end)  # past the comma
            elif c == _LBRACKET:
                i = _ws(b, i + 1, end)
                j = 0
                while True:
                    i, value = _score(b, i, end)
                    if j == k or i < 0:
                        return REFUSED, expert, row, scores
                    scores[n, j] = value
                    j += 1
                    i = _ws(b, i, end)
                    if b[i] == _RBRACKET:
                        i += 1
                        break
                    i = _ws(b, i + 1, end)
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
            i = _ws(b, i, end)
            if b[i] == _RBRACE:
                break
            i = _ws(b, i + 1, end)  # past the comma
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
        i = _ws(b, starts[t], end)
        if i >= end or b[i] != _LBRACE:
            ptr[t + 1] = w
            continue
        i = _ws(b, i + 1, end)
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
            i = _ws(b, i + 1, end)
            if i >= end or b[i] != _COLON:
                good = False
                break
            i, x = _score(b, _ws(b, i + 1, end), end)
            if i < 0 or w == room:
                good = False
                break
            if w > first and index <= idx[w - 1]:
                ascending = False
            idx[w], val[w] = index, x
            w += 1
            i = _ws(b, i, end)
            if i < end and b[i] == _COMMA:
                i = _ws(b, i + 1, end)
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
