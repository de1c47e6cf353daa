"""The request-body reader (numba, cached on disk): a trial's or a batch's JSON object read
in one compiled pass, on the lexer of :mod:`models.kernels.jsontext`.

A body is read as its members (key and value spans, each value checked through all its
nesting), and a trial's ``instance``, when it is ``{"experts": v}`` or ``{"features": v}``
alone, is found on the way, so that the votes or features of ``v`` are read from its text
by :mod:`models.inputs.batch`. What the lexer refuses, these readers refuse: the caller
then parses the body with a full JSON parser (:mod:`app.http.bodies`).

Spans are rows of (key start, key end, value start, value end, value kind), the kind one
of the lexer's ``KIND_*``, re-exported here with the readers.

The readers are used once compiled (:func:`ready`): a worker's warm-up compiles them off
the event loop; without one, the first body that asks starts compiling them in a thread
of their own and bodies are read by the full parser meanwhile, so no request waits on
the compiler.
"""

from __future__ import annotations

import threading

import numpy as np
from numba import njit

from models.kernels.jsontext import (
    KIND_ARRAY,
    KIND_FALSE,
    KIND_FLOAT,
    KIND_INT,
    KIND_NULL,
    KIND_OBJECT,
    KIND_STRING,
    KIND_TRUE,
    REFUSED,
    literal,
    member_key,
    skip_ws,
    value_end,
)

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
    "MAX_MEMBERS",
    "batch_members",
    "hold",
    "members",
    "ready",
    "release",
    "trial_members",
    "warm",
]

MAX_MEMBERS = 8  # members: an object of more is refused (a trial body has at most 5)
# what an instance alone is, as trial_members finds it: {"experts": {...}} or {"features": {...}}
FORM_EXPERTS, FORM_FEATURES = 0, 1

_COMMA, _LBRACE, _RBRACE, _LBRACKET, _RBRACKET = b",{}[]"
_INSTANCE = np.frombuffer(b"instance", dtype=np.uint8)
_EXPERTS = np.frombuffer(b"experts", dtype=np.uint8)
_FEATURES = np.frombuffer(b"features", dtype=np.uint8)
_ITEMS = np.frombuffer(b"items", dtype=np.uint8)


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
    i = skip_ws(b, v1, end)
    if i < end and b[i] == _COMMA:
        return skip_ws(b, i + 1, end), True
    if i < end and b[i] == _RBRACE:
        return i + 1, False
    return REFUSED, False


@njit(cache=True, nogil=True)
def _object(b: np.ndarray, start: int, end: int) -> tuple[int, int, np.ndarray]:
    """``(n, i, spans)``: :func:`members` of the object at ``b[start:end]``, and ``i``
    just past its closing brace."""
    spans = np.empty((MAX_MEMBERS, 5), dtype=np.int64)
    i = skip_ws(b, start, end)
    if i >= end or b[i] != _LBRACE:
        return REFUSED, i, spans
    i = skip_ws(b, i + 1, end)
    if i < end and b[i] == _RBRACE:
        return 0, i + 1, spans
    n, more = 0, True
    while more:
        k0, k1, v0 = member_key(b, i, end)
        if v0 < 0:
            return REFUSED, i, spans
        v1, kind = value_end(b, v0, end)
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
    if n >= 0 and whole and skip_ws(b, i, end) != end:
        return REFUSED, spans
    return n, spans


@njit(cache=True, nogil=True)
def _is(b: np.ndarray, a: int, z: int, word: np.ndarray) -> bool:
    """Whether ``b[a:z]`` is ``word``."""
    return z - a == word.size and literal(b, a, z, word) == z


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
    i = skip_ws(b, start, end)
    if i >= end or b[i] != _LBRACE:
        return REFUSED, i, spans, e0, e1, form
    i = skip_ws(b, i + 1, end)
    if i < end and b[i] == _RBRACE:
        return 0, i + 1, spans, e0, e1, form
    n, more = 0, True
    while more:
        k0, k1, v0 = member_key(b, i, end)
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
            v1, kind = value_end(b, v0, end)
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
    if n >= 0 and skip_ws(b, i, b.size) != b.size:
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
    i = skip_ws(b, 0, end)
    if i >= end or b[i] != _LBRACE:
        return REFUSED, spans, REFUSED, counts[:0], rows[:0], instances[:0]
    i = skip_ws(b, i + 1, end)
    n, more = 0, True
    if i < end and b[i] == _RBRACE:
        i, more = i + 1, False
    while more:
        k0, k1, v0 = member_key(b, i, end)
        if v0 < 0:
            return REFUSED, spans, REFUSED, counts[:0], rows[:0], instances[:0]
        if v0 < end and b[v0] == _LBRACKET and _is(b, k0, k1, _ITEMS):
            kind = KIND_ARRAY
            m = 0
            v1 = skip_ws(b, v0 + 1, end)
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
                    v1 = skip_ws(b, v1, end)
                    if v1 < end and b[v1] == _COMMA:
                        v1 = skip_ws(b, v1 + 1, end)
                        continue
                    if v1 < end and b[v1] == _RBRACKET:
                        v1 += 1
                        break
                    return REFUSED, spans, REFUSED, counts[:0], rows[:0], instances[:0]
        else:
            v1, kind = value_end(b, v0, end)
        if v1 < 0 or _named(b, spans, n, k0, k1) or n == MAX_MEMBERS:
            return REFUSED, spans, REFUSED, counts[:0], rows[:0], instances[:0]
        spans[n, 0], spans[n, 1], spans[n, 2], spans[n, 3], spans[n, 4] = k0, k1, v0, v1, kind
        n += 1
        i, more = _after_member(b, v1, end)
        if i < 0:
            return REFUSED, spans, REFUSED, counts[:0], rows[:0], instances[:0]
    if skip_ws(b, i, end) != end:
        return REFUSED, spans, REFUSED, counts[:0], rows[:0], instances[:0]
    return n, spans, m, counts[:m], rows[:m], instances[:m]


_compiled = threading.Event()  # set once both readers are compiled in this process
_compiling = threading.Lock()  # held by the thread that compiles them
_held = threading.Event()  # set while a worker's warm-up compiles them among other kernels


def _compile() -> None:
    for instance in (b'{"experts": {"e0": "a"}}', b'{"features": {"0": 1.0}}'):
        trial = b'{"instance": %s, "trial_id": "t"}' % instance
        trial_members(np.frombuffer(trial, dtype=np.uint8))
        batch = b'{"items": [%s, %s]}' % (trial, trial)
        batch_members(np.frombuffer(batch, dtype=np.uint8), 9)


def warm() -> None:
    """Compile both readers (or load them from numba's cache), on bodies of both instance
    forms, read-only as a request's bytes are. A call made while another thread compiles
    them waits for it: numba's dispatchers are not safe to compile from two threads at
    once (one thread reads the signatures while the other adds one)."""
    with _compiling:
        if not _compiled.is_set():
            _compile()
            _compiled.set()


def hold() -> None:
    """Leave the readers to a warm-up about to compile them among other kernels: until
    :func:`release`, :func:`ready` answers False and compiles nothing, so no body calls a
    kernel (the readers' or those reading votes from text) while the warm-up does."""
    _held.set()


def release() -> None:
    """End :func:`hold`: the readers are used once compiled."""
    _held.clear()


def ready() -> bool:
    """Whether the readers are compiled and free to use. Outside a warm-up, the first call
    that finds them not starts compiling them in a background thread; until it is done,
    read bodies otherwise."""
    if _held.is_set():
        return False
    if _compiled.is_set():
        return True
    if not _compiling.locked():
        threading.Thread(target=warm, name="reader-warmup", daemon=True).start()
    return False
