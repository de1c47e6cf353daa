"""Error-correcting output codes: multi-class over binary learners (S3; Dietterich & Bakiri 1995).

A code matrix M in {0,1}^(k x L) gives every class a codeword (a row). Column l is a binary
problem: its learner sees +1 (its first label) iff M[y][l] = 1. A prediction decodes the
columns' outputs to the nearest codeword. A code whose rows are at least d apart corrects
floor((d - 1) / 2) wrong columns.

Refusals: roll back. The columns share one spec, so either none can refuse or all are
journalled: each column's trial leaves an undo token, and a refusal undoes the columns
that learned before it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from models.core.hypothesis import Hypothesis, InstanceCheck, Label, frozen
from models.core.instance import Attributes
from models.core.kinds import build
from models.core.learner import CannotGrow, Learner, Spec
from models.core.nested import build_inner, import_children, inner_spec
from models.core.params import MAX_SIZE, Integer, InvalidParameter, Labels, Options
from models.core.state import InvalidState
from models.ensembles.codes import (
    MAX_EXHAUSTIVE,
    MAX_LENGTH,
    columns_distinct,
    default_length,
    dense_code,
    exhaustive_code,
    hamming_decode,
    hamming_distances,
    loss_decode,
    losses,
    min_row_distance,
    one_per_class_code,
    random_code,
    seeded_random_code,
)

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
#: Limits that keep decoding cheap: classes (columns: MAX_LENGTH in models.ensembles.codes).
MAX_CLASSES = 1024


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
        self.weights = frozen(weights)

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
    conversion (``subexpert``; Mesterharm & Hsu, §III).

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
        self._learner = inner_spec(column)
        self._column_spec = column.spec()
        self.value_range = column.value_range

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
        out = seeded_random_code(k, length, self.seed, self.n_tries)
        if min_row_distance(out) == 0:
            raise InvalidParameter(
                "length", length, f"more columns: {length} random columns left two classes equal"
            )
        return out

    def spec_params(self) -> dict[str, Any]:
        return {**self.get_params(), "learner": self._learner}

    @property
    def input_size(self) -> int:
        return self.n_features

    def _reset_state(self) -> None:
        self.code_ = self._code.astype(np.float64)
        self.columns_ = [build(self._column_spec) for _ in range(self._code.shape[1])]

    # -- a larger input, more labels -----------------------------------------------------

    def _can_grow(self) -> None:
        self.columns_[0]._can_grow()

    def _take(self, old: Learner, at: np.ndarray) -> None:
        """Every column grows as its learner's kind does, over the same code. New labels
        take new rows only when the code for all the labels keeps the old classes' rows
        and columns (the dense code, while the classes fit in its bits): a new column
        would be a binary problem whose learner had to learn every past trial."""
        assert isinstance(old, ECOC)
        k = old.n_classes
        if self.n_classes > k:
            code = self._code.astype(np.float64)
            if code.shape[1] != old.code_.shape[1] or not np.array_equal(code[:k], old.code_):
                raise CannotGrow(
                    f"ecoc cannot take new labels with its {self._code_kind} code: the code "
                    f"for {self.n_classes} classes has other columns than the one for {k}, and "
                    "a new column's learner would have had to learn every past trial (only "
                    "the dense code takes new labels, while they fit in its bits)"
                )
            self.code_ = code
        else:
            self.code_ = old.code_.copy()
        for col, was in zip(self.columns_, old.columns_, strict=True):
            col._adopt(was, at)

    # -- state -----------------------------------------------------------------------------

    def _array_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"code_": self._code.shape}

    def _check_state(self) -> None:
        code = self.code_
        if not np.isin(code, (0.0, 1.0)).all():
            raise InvalidState("ecoc code_: entries must be 0 or 1")
        bits = code.astype(np.uint8)
        if self._code_kind == "random":
            if not columns_distinct(bits) or min_row_distance(bits) == 0:
                raise InvalidState(
                    "ecoc code_: a random code needs distinct rows and no constant, equal or "
                    "complementary columns"
                )
        elif not np.array_equal(bits, self._code):
            raise InvalidState(f"ecoc code_: not the {self._code_kind} code")

    def _export_extra(self) -> dict[str, Any]:
        return {f"column:{j}": col.export_state() for j, col in enumerate(self.columns_)}

    def _import_extra(self, children: Mapping[str, Any]) -> None:
        import_children(self.columns_, children, "column", self.kind)

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
        plain = self._journal is None  # no checkpoint open: nothing to journal
        for j, col in enumerate(self.columns_):
            y = 1 if target[j] else -1
            out = col.learn(x, y) if plain else self._member_learns(col, x, y)
            bits[j] = target[j] != out.mistake  # the column's prediction, before it learnt
            updated |= out.updated
        if margins is not None:
            return loss_decode(margins, self.code_), updated
        return hamming_decode(bits, self.code_), updated

    def can_refuse(self) -> bool:
        return self.columns_[0].can_refuse()

    def _save(self, x: Attributes, whole: bool) -> Any:
        return None  # the columns' trials journal themselves

    def _restore(self, saved: Any) -> None:
        pass

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


# -- the column learner ------------------------------------------------------------------------


def _column_learner(learner: Mapping[str, Any] | Learner, n_features: int) -> Learner:
    """Build one column's learner: a binary attribute learner with labels (1, -1)."""
    expected = "a binary attribute learner: winnow, balanced-winnow, perceptron or alma"
    column = build_inner(learner, labels=[1, -1], size=n_features)
    if column.input_kind != "attributes" or column.n_classes != 2:
        raise InvalidParameter("learner", inner_spec(column), expected)
    return column
