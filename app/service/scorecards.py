"""Per-expert scorecards of a fusion model: each classifier its input names, judged on
the trials it votes in.

A classifier's *top vote* on a trial is the label it scores highest (ties: the lowest
label index; a label it leaves out scores 0), read from its own sub-expert under the
input's first normalisation (each normalisation keeps the order of the scores). A
classifier with no vote there abstains and is not judged on the trial: one that gives
no vote, and under ``raw`` or ``sum-to-one`` one whose scores are all 0 (they leave no
trace in the instance; under ``rank`` and ``argmax`` such a vote is a tie, for the first
label). For each classifier the monitor counts the trials it voted in, its mistakes (top
vote not the label), its agreements (top vote the label the model served: its share of
the fused decision), its confusion counts (true label -> top vote -> n) and its last
:data:`WINDOW` verdicts, a ring. A trial costs one binary search and O(labels it votes
for) per live classifier, in one compiled call.

State (:meth:`Scorecards.export`)::

    {"version": 1, "experts": [names], "window": 1000,
     "counts": int64 [n, 3] (trials, mistakes, agreed),
     "recent": bool [n, window] (verdict of trial t at t % window: 1 a mistake),
     "confusion": int64 [m, 4] (expert, true class, top class, n), sorted}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit

from app.service.monitor import WARM_ROWS, Kind
from models.core.instance import Attributes, Experts, consecutive_expert_rows
from models.core.learner import Learner
from models.core.state import InvalidState, decode_array, encode_array
from models.inputs.space import InputSpace

__all__ = ["KIND", "NAME", "SPARK_BLOCK", "WINDOW", "Scorecards"]

NAME = "scorecards"  # its name among the monitors (the key of its state in snapshots)
FORMAT_VERSION = 1
WINDOW = 1_000  # the recent verdicts kept per classifier
SPARK_BLOCK = 50  # trials per point of the recent error's sparkline
_CLASS_BITS = 16  # a class in a confusion key (labels are at most 4,096)
_CLASS_MASK = (1 << _CLASS_BITS) - 1
_FIRST_TABLE = 64  # slots of the confusion table at first (a power of two)
_WORDS = -(-WINDOW // 64)  # 64-bit words of a classifier's ring of verdicts

# A classifier's row of ``cards_`` (one array: a compiled call costs less with fewer):
# its sub-expert, whether it votes (0 retired), its trials, mistakes and agreements, then
# its ring of recent verdicts as bits (trial t's at bit t % WINDOW: 1 a mistake). The
# confusion table ``table_`` holds keys (row KEYS, -1 free) and their counts (row NS).
SLOT, LIVE, TRIALS, MISTAKES, AGREED, RING = range(6)
COLUMNS = RING + _WORDS
KEYS, NS = 0, 1


@njit(cache=True, nogil=True)
def _judge(
    e: np.ndarray,
    c: np.ndarray,
    v: np.ndarray,
    cards: np.ndarray,
    table: np.ndarray,
    k: int,
    y: int,
    served: int,
) -> int:  # pragma: no cover (compiled)
    """Judge every live classifier that votes in the instance ``(e, c, v)`` (sorted by
    sub-expert, then class) whose label is ``y``; returns the confusion keys it added."""
    added = 0
    for i in range(cards.shape[0]):
        if cards[i, LIVE] == 0:
            continue
        s = cards[i, SLOT]
        j = np.searchsorted(e, s)
        if j >= e.size or e[j] != s:
            continue  # abstains
        top, best, expect, gap = c[j], v[j], 0, -1
        while j < e.size and e[j] == s:
            if gap < 0 and c[j] != expect:
                gap = expect  # the first class it leaves out (its score 0)
            expect = c[j] + 1
            if v[j] > best:
                top, best = c[j], v[j]
            j += 1
        if gap < 0 and expect < k:
            gap = expect
        if best < 0.0 and gap >= 0:
            top = gap
        t = cards[i, TRIALS] % WINDOW
        word, bit = RING + t // 64, np.int64(1) << (t % 64)
        if top != y:
            cards[i, MISTAKES] += 1
            cards[i, word] |= bit
        else:
            cards[i, word] &= ~bit
        cards[i, TRIALS] += 1
        if top == served:
            cards[i, AGREED] += 1
        added += _count(table, (i << (2 * _CLASS_BITS)) | (y << _CLASS_BITS) | top, 1)
    return added


@njit(cache=True, nogil=True)
def _judge_run(  # type: ignore[no-untyped-def]
    indptr, e, c, v, cards, table, k, ys, served, room
) -> tuple[int, int]:  # pragma: no cover (compiled)
    """:func:`_judge` of each row ``t`` (the triples ``indptr[t]:indptr[t + 1]``) with
    label ``ys[t]`` and prediction ``served[t]``, in order, stopping before a row that
    might add more confusion keys than ``room`` has left; (rows judged, keys added)."""
    added = 0
    for t in range(ys.shape[0]):
        if added + cards.shape[0] > room:  # (a row adds at most a key per classifier)
            return t, added
        lo, hi = indptr[t], indptr[t + 1]
        added += _judge(e[lo:hi], c[lo:hi], v[lo:hi], cards, table, k, ys[t], served[t])
    return ys.shape[0], added


@njit(cache=True, nogil=True, inline="always")
def _count(table: np.ndarray, key: int, n: int) -> int:  # pragma: no cover (compiled)
    """Add ``n`` to ``key``'s count in the open-addressed table; 1 when the key is new."""
    mask = table.shape[1] - 1
    h = int((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(33)) & mask
    while table[KEYS, h] >= 0 and table[KEYS, h] != key:
        h = (h + 1) & mask
    table[NS, h] += n
    if table[KEYS, h] == key:
        return 0
    table[KEYS, h] = key
    return 1


@njit(cache=True, nogil=True)
def _fill(table: np.ndarray, keys: np.ndarray, ns: np.ndarray) -> None:  # pragma: no cover
    for t in range(keys.size):
        _count(table, keys[t], ns[t])


def _table(keys: np.ndarray, ns: np.ndarray, room: int = 0) -> np.ndarray:
    """A confusion table holding ``keys`` (distinct) with their counts, at most half full
    with ``room`` keys more."""
    size = _FIRST_TABLE
    while size < 2 * (keys.size + room) + 2:
        size *= 2
    table = np.zeros((2, size), dtype=np.int64)
    table[KEYS] = -1
    _fill(table, np.ascontiguousarray(keys), np.ascontiguousarray(ns))
    return table


_BITS = np.int64(1) << np.arange(64, dtype=np.int64)


class Scorecards:
    """The scorecards of the classifiers of one model's input (see the module)."""

    def __init__(self, space: InputSpace) -> None:
        self.cards_ = np.zeros((0, COLUMNS), dtype=np.int64)
        self.table_ = _table(np.zeros(0, np.int64), np.zeros(0, np.int64))
        self.used_ = 0  # keys in the table
        self.grown(space)

    # -- the monitor's contract ---------------------------------------------------------

    def judged(self, seq: int, x: Attributes | Experts, y: int, served: int, own: int) -> None:
        if type(x) is not Experts:
            return
        self.used_ += _judge(x.expert, x.cls, x.value, self.cards_, self.table_, self.k_, y, served)
        if 2 * self.used_ > self.table_.shape[1]:
            keys, ns = self._confusion()
            self.table_ = _table(keys, ns)

    def judged_run(
        self,
        first: int,
        xs: Sequence[Attributes | Experts],
        ys: Sequence[int],
        predicted: Sequence[int],
    ) -> None:
        run = consecutive_expert_rows(xs)
        if run is None:  # one by one: not rows of a batch
            for t, (x, y, p) in enumerate(zip(xs, ys, predicted, strict=True)):
                self.judged(first + t, x, y, p, p)
            return
        batch = run[0].between(run[1], run[1] + len(xs))
        ys_, ps = np.asarray(ys, dtype=np.int64), np.asarray(predicted, dtype=np.int64)
        n, at = self.cards_.shape[0], 0
        while at < ys_.size:
            room = self.table_.shape[1] // 2 - self.used_
            if room < n:  # grown as one by one grows it, before the next row
                keys, ns = self._confusion()
                self.table_ = _table(keys, ns, n)
                continue
            done, added = _judge_run(
                batch.indptr[at:], batch.expert, batch.cls, batch.value,
                self.cards_, self.table_, self.k_, ys_[at:], ps[at:], room,
            )  # fmt: skip
            self.used_ += added
            at += done

    def grown(self, space: InputSpace) -> None:
        names = space.expert_names
        n, had = len(names), self.cards_.shape[0]
        if n > had:  # classifiers come after the others: theirs start empty
            self.cards_ = np.concatenate([self.cards_, np.zeros((n - had, COLUMNS), np.int64)])
        self.names_ = names
        self.retired_ = space.retired
        self.labels_ = [str(label) for label in space.labels]
        self.k_ = space.n_classes
        # each classifier's own sub-expert, under the first normalisation
        self.cards_[:, SLOT] = [space.expert_slots(name)[0] for name in names]
        self.cards_[:, LIVE] = [name not in self.retired_ for name in names]

    def relearned(self, learner: Learner) -> None:
        """Nothing: a classifier's scorecard does not depend on the learner."""

    def export(self) -> dict[str, Any]:
        keys, ns = self._confusion()
        rows = np.stack(
            [
                keys >> (2 * _CLASS_BITS),
                (keys >> _CLASS_BITS) & _CLASS_MASK,
                keys & _CLASS_MASK,
                ns,
            ],
            axis=1,
        )
        return {
            "version": FORMAT_VERSION,
            "experts": list(self.names_),
            "window": WINDOW,
            "counts": encode_array(self.cards_[:, TRIALS : AGREED + 1]),
            "recent": encode_array(self._ring()),
            "confusion": encode_array(rows.reshape(-1, 4)),
        }

    def figures(self) -> dict[str, Any]:
        return {"scorecards": self.cards()}

    # -- what it shows ------------------------------------------------------------------

    def cards(self, most: int | None = None) -> list[dict[str, Any]]:
        """A scorecard per classifier, in the input's order; of the ``most`` (None: all)
        that voted in the most trials (ties: the first named) when there are more."""
        n = len(self.names_)
        shown = np.arange(n)
        if most is not None and n > most:
            order = np.argsort(-self.cards_[:, TRIALS], kind="stable")
            shown = np.sort(order[:most])
        keys, ns = self._confusion()
        bounds = np.searchsorted(keys >> (2 * _CLASS_BITS), np.arange(n + 1)).tolist()
        ring = self._ring(shown)
        out = []
        for row, i in enumerate(shown.tolist()):
            trials, mistakes, agreed = self.cards_[i, TRIALS : AGREED + 1].tolist()
            confusion: dict[str, dict[str, int]] = {}
            a, b = bounds[i], bounds[i + 1]
            for key, m in zip(keys[a:b].tolist(), ns[a:b].tolist(), strict=True):
                y, top = (
                    self.labels_[(key >> _CLASS_BITS) & _CLASS_MASK],
                    self.labels_[key & _CLASS_MASK],
                )
                confusion.setdefault(y, {})[top] = m
            # its recent verdicts, oldest first
            t = trials % WINDOW
            verdicts = ring[row, :trials] if trials < WINDOW else np.roll(ring[row], -t)
            wrong = int(verdicts.sum())
            out.append(
                {
                    "expert": self.names_[i],
                    "retired": self.names_[i] in self.retired_,
                    "trials": trials,
                    "mistakes": mistakes,
                    "error_rate": _rate(mistakes, trials),
                    "recent": {
                        "trials": verdicts.size,
                        "mistakes": wrong,
                        "error_rate": _rate(wrong, verdicts.size),
                    },
                    "confusion": confusion,
                    "agreed": agreed,
                    "agreement": _rate(agreed, trials),
                    "spark": [
                        float(verdicts[a : a + SPARK_BLOCK].mean())
                        for a in range(0, verdicts.size, SPARK_BLOCK)
                    ],
                }
            )
        return out

    def _ring(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The rings of verdicts of classifiers ``rows`` (None: all) as booleans."""
        words = self.cards_[:, RING:] if rows is None else self.cards_[rows, RING:]
        bits = (words[:, :, None] & _BITS[None, None, :]) != 0
        return bits.reshape(words.shape[0], -1)[:, :WINDOW]

    def _confusion(self) -> tuple[np.ndarray, np.ndarray]:
        """The confusion keys in use, ascending, and their counts."""
        used = self.table_[KEYS] >= 0
        keys, ns = self.table_[KEYS, used], self.table_[NS, used]
        order = np.argsort(keys)
        return keys[order], ns[order]

    # -- its state ----------------------------------------------------------------------

    @classmethod
    def read(cls, doc: Any, space: InputSpace) -> Scorecards:
        """The scorecards of state ``doc`` for a model of ``space``; :class:`InvalidState`
        when it does not fit (the classifiers, the window, counts that disagree)."""
        what = "monitors.scorecards"
        members = {"version", "experts", "window", "counts", "recent", "confusion"}
        if not isinstance(doc, dict) or set(doc) != members:
            got = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
            raise InvalidState(f"{what}: expected an object of {sorted(members)}, got {got}")
        if doc["version"] != FORMAT_VERSION:
            raise InvalidState(f"{what}.version: expected {FORMAT_VERSION}, got {doc['version']!r}")
        names = list(space.expert_names)
        if doc["experts"] != names:
            raise InvalidState(f"{what}.experts: expected the model's {names}")
        if doc["window"] != WINDOW:
            raise InvalidState(f"{what}.window: expected {WINDOW}, got {doc['window']!r}")
        n, k = len(names), space.n_classes
        counts = decode_array(doc["counts"], f"{what}.counts", "int64", (n, 3))
        recent = decode_array(doc["recent"], f"{what}.recent", "bool", (n, WINDOW))
        rows = decode_array(doc["confusion"], f"{what}.confusion", "int64", (-1, 4))
        trials = counts[:, 0]
        if (counts < 0).any() or (counts[:, 1:] > trials[:, None]).any():
            raise InvalidState(f"{what}.counts: expected 0 <= mistakes, agreed <= trials")
        if (recent & (np.arange(WINDOW)[None, :] >= trials[:, None])).any():
            raise InvalidState(f"{what}.recent: a verdict beyond a classifier's trials")
        e, y, top, ns = rows.T
        if ((e < 0) | (e >= n) | (y < 0) | (y >= k) | (top < 0) | (top >= k) | (ns <= 0)).any():
            raise InvalidState(
                f"{what}.confusion: expected rows (expert < {n}, class < {k}, class < {k}, n > 0)"
            )
        keys = (e << (2 * _CLASS_BITS)) | (y << _CLASS_BITS) | top
        if keys.size > 1 and not (keys[1:] > keys[:-1]).all():
            raise InvalidState(f"{what}.confusion: expected rows sorted, each once")
        summed = np.zeros((n, 2), dtype=np.int64)
        np.add.at(summed, (e, 0), ns)
        np.add.at(summed, (e, 1), ns * (y != top))
        if not np.array_equal(summed, counts[:, :2]):
            raise InvalidState(f"{what}.confusion: its sums are not the trials and mistakes")
        out = cls(space)
        out.cards_[:, TRIALS : AGREED + 1] = counts
        padded = np.zeros((n, 64 * _WORDS), dtype=np.int64)
        padded[:, :WINDOW] = recent
        out.cards_[:, RING:] = (padded.reshape(n, _WORDS, 64) * _BITS).sum(axis=2)
        out.table_, out.used_ = _table(keys, ns), keys.size
        return out


def _rate(mistakes: int, trials: int) -> float | None:
    return mistakes / trials if trials else None


def _follows(space: InputSpace, form: str, learner: Learner) -> bool:
    return form == "experts" and space.experts is not None


#: the kind: every model whose input has experts
KIND = Kind(
    follows=_follows,
    fresh=lambda space, form, learner: Scorecards(space),
    read=lambda doc, space, form, learner: Scorecards.read(doc, space),
)


def warm() -> None:
    """Compile the kernels (or load them from numba's cache): a trial judged, a run of
    them, the scorecards read and their state read back, on a small input."""
    space = InputSpace(["a", "b"], experts={"expert_names": ["e0", "e1"]})
    cards = Scorecards(space)
    cards.judged(1, space.encode({"experts": {"e0": "a", "e1": "b"}}, "experts"), 0, 0, 0)
    cards.judged_run(2, Experts.rows(*WARM_ROWS), [0, 1], [1, 1])  # rows of a batch
    Scorecards.read(cards.export(), space).cards()
