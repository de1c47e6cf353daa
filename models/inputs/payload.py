"""Readers of JSON-like input: shown values, finite numbers, config sections, expert votes."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from models.core.instance import InvalidInstance
from models.core.params import Bool, Integer, InvalidParameter, Options

__all__ = [
    "check_option",
    "indexed_path",
    "is_list",
    "key_path",
    "normalise_votes",
    "read_names",
    "read_numbers",
    "read_section",
    "read_votes",
    "show",
]

_FAST_NUMBERS = frozenset({float, int, np.float64})


# -- small helpers: showing values and reading numbers --------------------------------


def show(v: Any) -> str:
    """A value as JSON would spell it, for error messages."""
    if isinstance(v, bool | np.bool_):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, float | np.floating):
        return repr(float(v))
    if isinstance(v, Mapping):
        return "an object"
    if isinstance(v, list | tuple | np.ndarray):
        return "a list"
    return repr(v)


def key_path(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if isinstance(key, str) else f"{prefix}[{key!r}]"


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool)


def _number(v: Any, path: str) -> float:
    if _is_number(v):
        try:
            f = float(v)
        except OverflowError:
            f = math.inf
        if math.isfinite(f):
            return f
    raise InvalidInstance(f"{path} is {show(v)}: expected a finite number")


def read_numbers(values: Any, path: Callable[[int], str]) -> np.ndarray:
    """Finite numbers (no booleans, no strings) as a new float array; ``path(i)`` names item i."""
    if isinstance(values, np.ndarray):
        if values.ndim == 1 and values.dtype.kind in "iuf":
            arr = values.astype(np.float64)
            if np.isfinite(arr).all():
                return arr
        values = list(values)
    elif set(map(type, values)) <= _FAST_NUMBERS:
        try:
            arr = np.array(values, dtype=np.float64)
        except OverflowError:
            arr = np.array([math.inf])
        if np.isfinite(arr).all():
            return arr
    return np.array([_number(v, path(i)) for i, v in enumerate(values)], dtype=np.float64)


def indexed_path(path: str) -> Callable[[int], str]:
    return lambda i: f"{path}[{i}]"


def is_list(v: Any) -> bool:
    return isinstance(v, list | tuple | np.ndarray)


# -- config validation -----------------------------------------------------------------


def read_section(value: Any, name: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidParameter(name, value, "an object")
    for key in value:
        if key not in allowed:
            raise InvalidParameter(
                key_path(name, key), value[key], "no such key; one of " + ", ".join(allowed)
            )
    return value


def check_option(value: Any, name: str, constraint: Integer | Bool | Options) -> Any:
    expected = constraint.check(value)
    if expected is not None:
        raise InvalidParameter(name, value, expected)
    return value


def read_names(value: Any, name: str) -> list[str]:
    expected = "a non-empty list of distinct non-empty strings"
    if not isinstance(value, Sequence) or isinstance(value, str | bytes) or not value:
        raise InvalidParameter(name, value, expected)
    seen: set[str] = set()
    for i, v in enumerate(value):
        if not isinstance(v, str) or not v:
            raise InvalidParameter(f"{name}[{i}]", v, "a non-empty string")
        if v in seen:
            raise InvalidParameter(f"{name}[{i}]", v, "a name not already listed")
        seen.add(v)
    return list(value)


# -- expert votes ----------------------------------------------------------------------


def read_votes(
    votes: Any,
    expert_index: Mapping[str, int],
    class_key: Callable[[Any], int | None],
    labels: tuple[Any, ...],
    classes: Mapping[Any, int] | None = None,
    keys_in_order: tuple[str, ...] | None = None,
) -> tuple[list[int], list[tuple[str, bool]], np.ndarray]:
    """The voting experts' indices, (field path, given as a list) and raw k-scores.

    ``classes`` maps exact str and int labels to their class, a shortcut for class_key;
    ``keys_in_order`` are the labels as JSON object keys, in class order: a mapping vote
    whose keys are exactly these (a score for every label, as classifiers post them)
    needs no lookup.

    Fusion models read one vote per deployed classifier on every trial, so the common
    forms (a bare label, a list of scores, a plain dict) are tested by exact type first.
    """
    if votes is None:
        votes = {}
    elif not isinstance(votes, Mapping):
        raise InvalidInstance(f"experts is {show(votes)}: expected an object {{expert name: vote}}")
    k = len(labels)
    fast = classes or {}
    if type(votes) is dict and votes:
        got = _read_alike(votes, expert_index, k, fast, keys_in_order)
        if got is not None:
            return got
    rows: list[int] = []
    named: list[str] = []  # the voting experts' names, for the paths below
    listed_at: set[int] = set()  # rows given as lists (their errors name an index)
    scores = np.zeros((len(votes), k))
    ones_r: list[int] = []  # bare-label votes, set all at once below
    ones_c: list[int] = []
    listed_r: list[int] = []  # lists of scores, converted all at once below
    listed_v: list[Any] = []
    mapped_r: list[int] = []  # {label: score} objects, converted all at once below
    mapped_v: list[dict[Any, Any]] = []
    for name, vote in votes.items():
        i = expert_index.get(name, -1) if type(name) is str else -1
        if i < 0:
            raise InvalidInstance(f"{key_path('experts', name)}: unknown expert")
        kind = type(vote)
        if kind is dict:
            if vote:
                mapped_r.append(len(rows))
                mapped_v.append(vote)
                rows.append(i)
                named.append(name)
            continue
        if vote is None:
            continue
        r = len(rows)
        listed = kind is list or kind is tuple or kind is np.ndarray
        if kind is str or kind is int or not (listed or isinstance(vote, Mapping)):
            c = fast.get(vote) if kind is str or kind is int else None
            if c is None:
                c = class_key(vote)
            if c is None:
                expected = f"expected a label, a list of {k} scores or an object {{label: score}}"
                if isinstance(vote, str | int) and not isinstance(vote, bool):
                    expected = f"unknown label, expected one of {list(labels)}"
                raise InvalidInstance(f"experts.{name} is {show(vote)}: {expected}")
            ones_r.append(r)
            ones_c.append(c)
        elif listed:
            if len(vote) != k:
                raise InvalidInstance(f"experts.{name} has {len(vote)} scores: expected {k}")
            listed_r.append(r)
            listed_v.append(vote)
            listed_at.add(r)
        elif not vote:
            continue
        else:
            _read_mapping_vote(vote, f"experts.{name}", scores[r], class_key)
        rows.append(i)
        named.append(name)
    paths = [(f"experts.{name}", r in listed_at) for r, name in enumerate(named)]
    if ones_r:
        scores[ones_r, ones_c] = 1.0
    if listed_r:
        flat = [v for vote in listed_v if type(vote) is not np.ndarray for v in vote]
        arr = None
        if set(map(type, flat)) <= _FAST_NUMBERS and len(flat) == k * len(listed_v):
            with contextlib.suppress(OverflowError):
                arr = np.array(flat, dtype=np.float64).reshape(len(listed_v), k)
        if arr is not None and np.isfinite(arr).all():
            scores[listed_r] = arr
        else:  # the slow way, which names the bad score
            for r, vote in zip(listed_r, listed_v, strict=True):
                scores[r] = read_numbers(vote, indexed_path(paths[r][0]))
    if mapped_r and not _put_mappings(scores, mapped_r, mapped_v, fast, keys_in_order):
        for r, vote in zip(mapped_r, mapped_v, strict=True):  # the slow way, naming the fault
            scores[r] = 0.0
            _read_mapping_vote(vote, paths[r][0], scores[r], class_key)
    return rows, paths, scores[: len(rows)]


def _read_alike(
    votes: dict[Any, Any],
    expert_index: Mapping[str, int],
    k: int,
    classes: Mapping[Any, int],
    keys_in_order: tuple[str, ...] | None,
) -> tuple[list[int], list[tuple[str, bool]], np.ndarray] | None:
    """:func:`read_votes` of votes all of one plain form (as one classifier fleet posts
    them: every vote a list of k numbers, or every vote a non-empty object) from known
    experts, in one pass; None when they are not, for the general reading (which also
    names what is wrong)."""
    values = list(votes.values())
    kinds = set(map(type, values))
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    if kind is not list and kind is not dict:  # bare labels: the general reading is as quick
        return None
    names = list(votes)
    rows = [expert_index.get(n, -1) if type(n) is str else -1 for n in names]
    if -1 in rows:
        return None
    n = len(values)
    if kind is list:
        if any(len(v) != k for v in values):
            return None
        flat = [x for v in values for x in v]
        if not set(map(type, flat)) <= _FAST_NUMBERS:
            return None
        try:
            scores = np.array(flat, dtype=np.float64).reshape(n, k)
        except OverflowError:
            return None
        if not np.isfinite(scores).all():
            return None
        return rows, [(f"experts.{name}", True) for name in names], scores
    if not all(values):
        return None
    scores = np.zeros((n, k))
    if not _put_mappings(scores, list(range(n)), values, classes, keys_in_order):
        return None
    return rows, [(f"experts.{name}", False) for name in names], scores


def _put_mappings(
    scores: np.ndarray,
    rows: list[int],
    votes: list[dict[Any, Any]],
    classes: Mapping[Any, int],
    keys_in_order: tuple[str, ...] | None = None,
) -> bool:
    """Write ``{label: score}`` votes into their rows of ``scores`` in one pass; False
    (nothing written) when one is not plainly valid: :func:`_read_mapping_vote` then says
    what is wrong."""
    if keys_in_order is not None and all(tuple(vote) == keys_in_order for vote in votes):
        # a score for every label, in class order: the rows whole, no lookup
        flat = [v for vote in votes for v in vote.values()]
        if set(map(type, flat)) <= _FAST_NUMBERS:
            try:
                arr = np.array(flat, dtype=np.float64)
            except OverflowError:
                return False
            if not np.isfinite(arr).all():
                return False
            scores[rows] = arr.reshape(len(votes), scores.shape[1])
            return True
    labels = [label for vote in votes for label in vote]
    cs = [
        classes.get(label) if type(label) is str or type(label) is int else None for label in labels
    ]
    values = [v for vote in votes for v in vote.values()]
    if None in cs or not set(map(type, values)) <= _FAST_NUMBERS:
        return False
    try:
        arr = np.array(values, dtype=np.float64)
    except OverflowError:
        return False
    if not np.isfinite(arr).all():
        return False
    k = scores.shape[1]
    if len(cs) == len(votes):  # one label each (a classifier's top label and its score)
        scores.reshape(-1)[[r * k + c for r, c in zip(rows, cs, strict=True)]] = arr
        return True
    r = np.repeat(np.array(rows, dtype=np.int64), [len(vote) for vote in votes])
    flat = r * k + np.array(cs, dtype=np.int64)
    ordered = np.sort(flat)  # (np.unique hashes: far slower on arrays this small)
    if (ordered[1:] == ordered[:-1]).any():  # two keys of one vote name the same class
        return False
    scores.reshape(-1)[flat] = arr
    return True


def _read_mapping_vote(
    vote: Mapping[Any, Any], path: str, out: np.ndarray, class_key: Callable[[Any], int | None]
) -> None:
    seen = set()
    for label, score in vote.items():
        c = class_key(label)
        if c is None:
            raise InvalidInstance(f"{key_path(path, label)}: unknown label")
        if c in seen:
            raise InvalidInstance(f"{key_path(path, label)}: label given twice")
        seen.add(c)
        out[c] = _number(score, key_path(path, label))


def normalise_votes(
    scores: np.ndarray, paths: list[tuple[str, bool]], mode: str, labels: tuple[Any, ...]
) -> np.ndarray:
    """Apply ``normalize`` to each row (one voting expert) of ``scores``."""
    k = len(labels)
    if mode == "raw" or not scores.size:
        return scores
    if mode == "sum-to-one":
        if (scores < 0).any():
            r, c = (int(t[0]) for t in np.nonzero(scores < 0))
            path, listed = paths[r]
            field = f"{path}[{c}]" if listed else key_path(path, labels[c])
            raise InvalidInstance(
                f"{field} is {float(scores[r, c])!r}: expected a score >= 0 "
                "(normalize is sum-to-one)"
            )
        # divide by the row maximum first, so the sum cannot overflow
        top = scores.max(axis=1, keepdims=True)
        scaled = np.divide(scores, top, out=np.zeros_like(scores), where=top > 0)
        total = scaled.sum(axis=1, keepdims=True)
        return np.divide(scaled, total, out=np.zeros_like(scores), where=total > 0)
    if mode == "argmax":
        out = np.zeros_like(scores)
        out[np.arange(scores.shape[0]), scores.argmax(axis=1)] = 1.0
        return out
    # rank: (k - 1 - the scores above a score) / (k - 1) = (the scores <= it, less 1) /
    # (k - 1). In each row sorted, the scores <= the one at position j are those up to
    # the last position holding the same score.
    order = np.argsort(scores, axis=1, kind="stable")
    ordered = np.take_along_axis(scores, order, axis=1)
    last = np.full(scores.shape, k - 1, dtype=np.int64)
    last[:, :-1] = np.where(ordered[:, 1:] != ordered[:, :-1], np.arange(k - 1), k - 1)
    at_most = np.minimum.accumulate(last[:, ::-1], axis=1)[:, ::-1] + 1
    out = np.empty_like(scores)
    np.put_along_axis(out, order, (at_most - 1) / (k - 1), axis=1)
    return out
