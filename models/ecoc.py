"""Error-correcting output codes: multi-class over binary learners (ALGORITHMS.md §4.1; S3, DB95).

A code matrix M in {0,1}^(k x L) gives every class a codeword (a row). Column l is a binary
problem: its learner sees +1 (its first label) iff M[y][l] = 1. A prediction decodes the
columns' outputs to the nearest codeword. A code whose rows are at least d apart corrects
floor((d - 1) / 2) wrong columns.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from models.base import Hypothesis, InstanceCheck, Label, Learner, _frozen
from models.instance import Attributes
from models.params import MAX_SIZE, Integer, InvalidParameter, Labels, Options, Spec
from models.state import InvalidState
from models.wrapper import inner_spec

__all__ = [
    "ECOC",
    "ECOCHypothesis",
    "default_length",
    "dense_code",
    "exhaustive_code",
    "hamming_decode",
    "hamming_distances",
    "loss_decode",
    "losses",
    "min_row_distance",
    "one_per_class_code",
    "random_code",
]

CODES = ("one-per-class", "exhaustive", "random", "dense")
#: The exhaustive code has 2^(k-1) - 1 columns; S3 uses a column subset from k = 8 on.
MAX_EXHAUSTIVE = 11
#: Limits that keep code search and decoding cheap: classes, and columns of any code.
MAX_CLASSES = 1024
MAX_LENGTH = 4096


# -- codes -------------------------------------------------------------------------------------


def one_per_class_code(k: int) -> np.ndarray:
    """M = I_k: column c separates class c from the rest; rows are 2 apart."""
    return np.eye(k, dtype=np.uint8)


def dense_code(k: int) -> np.ndarray:
    """Row c is c in ceil(log2 k) bits, most significant first; rows may be 1 apart (S3)."""
    length = max(1, (k - 1).bit_length())
    shifts = np.arange(length - 1, -1, -1)
    return ((np.arange(k)[:, None] >> shifts) & 1).astype(np.uint8)


def exhaustive_code(k: int) -> np.ndarray:
    """DB95's exhaustive code: 2^(k-1) - 1 columns, rows 2^(k-2) apart.

    Row 1 is all ones; for i >= 2, entry (i, l) is floor(l / 2^(k-i)) mod 2.

    >>> exhaustive_code(3).tolist()
    [[1, 1, 1], [0, 0, 1], [0, 1, 0]]
    """
    if not 2 <= k <= MAX_EXHAUSTIVE:
        raise InvalidParameter("k", k, f"2 to {MAX_EXHAUSTIVE} classes for the exhaustive code")
    col = np.arange(2 ** (k - 1) - 1)
    shifts = np.arange(k - 2, -1, -1)  # 2^(k-i) for i = 2..k
    rows = (col[None, :] >> shifts[:, None]) & 1
    return np.vstack([np.ones((1, col.size), dtype=np.uint8), rows.astype(np.uint8)])


def default_length(k: int) -> int:
    """min(2^(k-1) - 1, max(ceil(10 log2 k), k)): DB95's range, capped by what exists."""
    return min(2 ** (k - 1) - 1, max(math.ceil(10 * math.log2(k)), k), MAX_LENGTH)


def random_code(k: int, length: int, rng: np.random.Generator, n_tries: int = 20) -> np.ndarray:
    """The best of ``n_tries`` random codes by minimum row distance (the first among equals).

    Entries are Bernoulli(1/2); a column that is constant, or equal or complementary to an
    earlier one, is drawn again, so at most 2^(k-1) - 1 columns exist.

    >>> code = random_code(4, 6, np.random.default_rng(1))
    >>> code.shape, min_row_distance(code) >= 2
    ((4, 6), True)
    """
    most = 2 ** (k - 1) - 1
    if not 1 <= length <= most:
        raise InvalidParameter(
            "length", length, f"1 to 2^(k-1) - 1 = {most} distinct columns for {k} classes"
        )
    best, best_d = None, -1
    for _ in range(n_tries):
        code = _random_columns(k, length, rng)
        d = min_row_distance(code)
        if d > best_d:
            best, best_d = code, d
    assert best is not None
    return best


@functools.lru_cache(maxsize=64)
def _seeded_random_code(k: int, length: int, seed: int, n_tries: int) -> np.ndarray:
    """random_code from a seed, kept: clones and state imports rebuild the learner."""
    code = random_code(k, length, np.random.default_rng(seed), n_tries)
    code.flags.writeable = False
    return code


def _random_columns(k: int, length: int, rng: np.random.Generator) -> np.ndarray:
    cols: list[np.ndarray] = []
    seen: set[bytes] = set()
    while len(cols) < length:
        for col in rng.integers(0, 2, size=(length - len(cols), k), dtype=np.uint8):
            if col.min() == col.max():
                continue
            key = hashlib.blake2b((col ^ (1 - col[0])).tobytes(), digest_size=16).digest()
            if key not in seen:
                seen.add(key)
                cols.append(col)
    return np.array(cols, dtype=np.uint8).T.copy()


def min_row_distance(code: np.ndarray) -> int:
    """The smallest Hamming distance between two rows (codewords) of ``code``.

    >>> min_row_distance(exhaustive_code(5)), min_row_distance(one_per_class_code(4))
    (8, 2)
    """
    m = np.asarray(code, dtype=np.float32)  # sums of at most 2^24 bits are exact
    if m.shape[0] < 2:
        raise ValueError(f"a code needs at least 2 rows, got {m.shape[0]}")
    ones = m.sum(axis=1)
    d = ones[:, None] + ones[None, :] - 2.0 * (m @ m.T)  # k x k: k is at most MAX_CLASSES
    np.fill_diagonal(d, np.inf)
    return int(d.min())


def _columns_distinct(code: np.ndarray) -> bool:
    """No column is constant, and no two are equal or complementary."""
    if (code.min(axis=0) == code.max(axis=0)).any():
        return False
    canonical = code ^ (1 - code[0])[None, :]  # flip each column to start with 1
    return int(np.unique(canonical, axis=1).shape[1]) == code.shape[1]


# -- decoding ----------------------------------------------------------------------------------


def hamming_distances(bits: np.ndarray, code: np.ndarray) -> np.ndarray:
    """Hamming(b, M[c]) for every class c."""
    return np.count_nonzero(np.asarray(code) != np.asarray(bits)[None, :], axis=1)


def hamming_decode(bits: Sequence[int] | np.ndarray, code: np.ndarray) -> int:
    """The class whose codeword is nearest to ``bits``; ties go to the smallest class.

    >>> hamming_decode([0, 1, 0], exhaustive_code(3)), hamming_decode([0, 0, 0], exhaustive_code(3))
    (2, 1)
    """
    return int(np.argmin(hamming_distances(np.asarray(bits), code)))


def losses(margins: np.ndarray, code: np.ndarray) -> np.ndarray:
    """sum_l max(0, -(2 M[c][l] - 1) m_l) for every class c (hinge at zero margin)."""
    signs = 2.0 * np.asarray(code, dtype=np.float64) - 1.0
    return np.maximum(0.0, -signs * np.asarray(margins, dtype=np.float64)[None, :]).sum(axis=1)


def loss_decode(margins: Sequence[float] | np.ndarray, code: np.ndarray) -> int:
    """Loss-based decoding (§4.1, beyond S3): the class of least loss, ties to the smallest."""
    return int(np.argmin(losses(np.asarray(margins), code)))


# -- the learner -------------------------------------------------------------------------------


class ECOCHypothesis(Hypothesis):
    """An immutable ECOC hypothesis: the columns' snapshots and the code."""

    __slots__ = ("check", "code", "columns", "decoding", "labels", "weights")

    def __init__(
        self,
        columns: Sequence[Hypothesis],
        code: np.ndarray,
        labels: tuple[Label, ...],
        decoding: str,
        check: InstanceCheck,
        weights: np.ndarray,
    ) -> None:
        self.columns = tuple(columns)
        self.code = np.array(code, dtype=np.float64)
        self.code.flags.writeable = False
        self.labels = labels
        self.decoding = decoding
        self.check = check
        self.weights = _frozen(weights)

    def scores(self, x: Any) -> np.ndarray:
        x = self.check(x)
        if self.decoding == "loss":
            margins = np.array([_margin(h.scores(x)) for h in self.columns])
            return 0.0 - losses(margins, self.code)
        bits = np.array([h.predict_class(x) == 0 for h in self.columns], dtype=np.float64)
        return 0.0 - hamming_distances(bits, self.code)


def _margin(s: np.ndarray) -> float:
    """The margin of a binary score vector (m, -m)."""
    return float(s[0] - s[1]) / 2.0


class ECOC(Learner):
    """Multi-class learning by error-correcting output codes over binary attribute learners.

    Column l's learner learns +1 iff M[y][l] = 1 on every trial, by its own rule. Hamming
    decoding predicts the class whose codeword is nearest to the columns' predictions;
    loss decoding the class of least sum_l max(0, -(2 M[c][l] - 1) m_l) over the columns'
    margins m_l. Ties go to the smallest class. ``scores`` are the negative distances (or
    losses). A trial is a mistake when the decoded class is wrong, and updates when any
    column updates. ECOC takes attribute instances only; for sub-experts use the sub-expert
    conversion (§1.6).

    The code matrix is part of the learned state (``code_``), so a random code survives an
    export even if numpy's generator changes; importing checks it: the one-per-class,
    exhaustive and dense codes must be exactly themselves, a random code must have distinct
    rows and no constant, equal or complementary columns.

    With loss decoding, columns that do not update on a correct zero margin (Winnow,
    Balanced Winnow with ``update_on_zero_margin=False``) can leave a mistake without an
    update: a zero margin costs every class nothing.

    Parameters
    ----------
    learner
        Spec (or instance) of a binary attribute learner: winnow, balanced-winnow,
        perceptron or alma. Each column gets a copy with labels (1, -1).
    n_features
        Number of attributes.
    labels
        The k >= 2 class labels, in class order.
    code
        ``"one-per-class"`` (M = I_k), ``"exhaustive"`` (DB95, 2 <= k <= 11), ``"random"``
        or ``"dense"`` (ceil(log2 k) bits, no error correction). None: exhaustive for
        k <= 7 (S3's practical range), random above.
    length
        Columns of a random code; None for :func:`default_length`. Only for random codes.
    seed
        Seed of the random code search.
    n_tries
        Random codes drawn; the one with the largest minimum row distance is kept.
    decoding
        ``"hamming"`` or ``"loss"``.

    Examples
    --------
    >>> ecoc = ECOC({"kind": "perceptron"}, n_features=3, labels=["a", "b", "c"])
    >>> ecoc.code_.astype(int).tolist()
    [[1, 1, 1], [0, 0, 1], [0, 1, 0]]
    >>> ecoc.learn([1.0, 0.0, 1.0], "b")
    Outcome(mistake=True, updated=True)
    >>> ecoc.predict([1.0, 0.0, 1.0]), ecoc.scores([1.0, 0.0, 1.0]).tolist()
    ('b', [-2.0, 0.0, -2.0])
    """

    kind = "ecoc"
    input_kind = "attributes"
    _parameter_constraints = {
        "learner": Spec(),
        "n_features": Integer(1, MAX_SIZE),
        "labels": Labels(),
        "code": Options(CODES, optional=True),
        "length": Integer(1, MAX_LENGTH, optional=True),
        "seed": Integer(0, 2**63 - 1),
        "n_tries": Integer(1, 1000),
        "decoding": Options(("hamming", "loss")),
    }
    _state_arrays = {"code_": "float64"}

    def __init__(
        self,
        learner: Mapping[str, Any] | Learner,
        n_features: int,
        labels: Sequence[Label],
        code: str | None = None,
        length: int | None = None,
        seed: int = 0,
        n_tries: int = 20,
        decoding: str = "hamming",
    ) -> None:
        self.learner = learner
        self.n_features = n_features
        self.labels = labels  # type: ignore[assignment]
        self.code = code
        self.length = length
        self.seed = seed
        self.n_tries = n_tries
        self.decoding = decoding
        self._initialise()

    # -- construction ----------------------------------------------------------------------

    def _check_params(self) -> None:
        k = len(self.labels)
        if k > MAX_CLASSES:
            raise InvalidParameter("labels", f"{k} labels", f"at most {MAX_CLASSES} labels")
        self._code = self._make_code(k)
        n_columns = self._code.shape[1]
        if n_columns * self.n_features > MAX_SIZE:
            raise InvalidParameter(
                "n_features",
                self.n_features,
                f"at most {MAX_SIZE // n_columns} for a code of {n_columns} columns "
                f"(at most {MAX_SIZE} weights in all)",
            )
        column = _column_learner(self.learner, self.n_features)
        self.learner = inner_spec(column)
        self._column_spec = column.spec()
        self.value_range = column.value_range  # type: ignore[misc]

    def _make_code(self, k: int) -> np.ndarray:
        code = self._code_kind = self.code or ("exhaustive" if k <= 7 else "random")
        if self.length is not None and code != "random":
            raise InvalidParameter("length", self.length, "null unless code is 'random'")
        if code == "one-per-class":
            return one_per_class_code(k)
        if code == "dense":
            return dense_code(k)
        if code == "exhaustive":
            if k > MAX_EXHAUSTIVE:
                raise InvalidParameter(
                    "code",
                    code,
                    f"a code other than 'exhaustive' for {k} labels: the exhaustive code "
                    f"has 2^(k-1) - 1 columns and is offered up to {MAX_EXHAUSTIVE} labels; "
                    "use 'random'",
                )
            return exhaustive_code(k)
        length = default_length(k) if self.length is None else self.length
        out = _seeded_random_code(k, length, self.seed, self.n_tries)
        if min_row_distance(out) == 0:
            raise InvalidParameter(
                "length", length, f"more columns: {length} random columns left two classes equal"
            )
        return out

    @property
    def input_size(self) -> int:
        return self.n_features

    def _reset_state(self) -> None:
        self.code_ = self._code.astype(np.float64)
        self.columns_ = [_rebuild(self._column_spec) for _ in range(self._code.shape[1])]

    # -- state -----------------------------------------------------------------------------

    def _array_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"code_": self._code.shape}

    def _check_state(self) -> None:
        code = self.code_
        if not np.isin(code, (0.0, 1.0)).all():
            raise InvalidState("ecoc code_: entries must be 0 or 1")
        bits = code.astype(np.uint8)
        if self._code_kind == "random":
            if not _columns_distinct(bits) or min_row_distance(bits) == 0:
                raise InvalidState(
                    "ecoc code_: a random code needs distinct rows and no constant, equal or "
                    "complementary columns"
                )
        elif not np.array_equal(bits, self._code):
            raise InvalidState(f"ecoc code_: not the {self._code_kind} code")

    def _export_extra(self) -> dict[str, Any]:
        return {f"column:{j}": col.export_state() for j, col in enumerate(self.columns_)}

    def _import_extra(self, children: Mapping[str, Any]) -> None:
        _import_children(self.columns_, children, "column", self.kind)

    # -- the trial -------------------------------------------------------------------------

    def _margins(self, x: Attributes) -> np.ndarray:
        return np.array([_margin(col.scores(x)) for col in self.columns_])

    def _scores(self, x: Attributes) -> np.ndarray:
        if self.decoding == "loss":
            return 0.0 - losses(self._margins(x), self.code_)
        bits = np.array([col.predict(x) == 1 for col in self.columns_], dtype=np.float64)
        return 0.0 - hamming_distances(bits, self.code_)

    def _learn(self, x: Attributes, c: int) -> tuple[int, bool]:
        target = self.code_[c]
        margins = self._margins(x) if self.decoding == "loss" else None
        bits = np.empty(target.size)
        updated = False
        for j, col in enumerate(self.columns_):
            out = col.learn(x, 1 if target[j] else -1)
            bits[j] = target[j] != out.mistake  # the column's prediction, before it learnt
            updated |= out.updated
        if margins is not None:
            return loss_decode(margins, self.code_), updated
        return hamming_decode(bits, self.code_), updated

    def weights(self) -> np.ndarray:
        """The columns' weight vectors, one column each: shape (n_features, L)."""
        return np.stack([col.weights() for col in self.columns_], axis=-1)  # type: ignore[attr-defined]

    def snapshot(self) -> ECOCHypothesis:
        return ECOCHypothesis(
            [col.snapshot() for col in self.columns_],
            self.code_,
            self.labels,
            self.decoding,
            self._check,
            self.weights(),
        )


# -- nested learners (shared with the ensembles) -----------------------------------------------


def _nested(exc: InvalidParameter) -> InvalidParameter:
    return InvalidParameter("learner." + exc.name, exc.value, exc.expected)


def _rebuild(spec: Mapping[str, Any]) -> Learner:
    from models.registry import build

    return build(spec)


def _column_learner(learner: Mapping[str, Any] | Learner, n_features: int) -> Learner:
    """Build one column's learner: a binary attribute learner with labels (1, -1)."""
    from models.registry import build

    expected = "a binary attribute learner: winnow, balanced-winnow, perceptron or alma"
    try:
        column = build(inner_spec(learner), labels=[1, -1], size=n_features)
    except InvalidParameter as exc:
        raise _nested(exc) from None
    if column.input_kind != "attributes" or column.n_classes != 2:
        raise InvalidParameter("learner", inner_spec(column), expected)
    return column


def _import_children(
    current: Sequence[Learner], children: Mapping[str, Any], role: str, kind: str
) -> None:
    """Import ``children["role:i"]`` into learner i (into the staged copy that
    ``Learner.import_state`` reads a document into, so a failure changes nothing)."""
    expected = [f"{role}:{i}" for i in range(len(current))]
    if set(children) != set(expected):
        extra = sorted(set(children) - set(expected))
        missing = sorted(set(expected) - set(children))
        raise InvalidState(f"{kind} state.children: missing {missing}, unexpected {extra}")
    for name, learner in zip(expected, current, strict=True):
        learner.import_state(children[name])
