"""The contract every learner keeps.

Every learner follows the trial protocol of on-line mistake-bounded learning (Mesterharm
1999, §1; Mesterharm & Hsu, §I): receive an instance, predict a label, receive the true
label, possibly update. A learner scores an instance, predicts a label, learns from
(instance, label) and reports whether that trial was a mistake and whether it updated. It
counts its trials, mistakes and updates, bumps ``version_`` on every change of hypothesis,
hands out immutable snapshots of its hypothesis, and exports and imports its whole state as
a plain document.

Parameters are constructor arguments stored under the same names; learned state lives in
attributes ending in ``_`` and is created by :meth:`Learner.reset`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from models.core import state as st
from models.core.hypothesis import Hypothesis, InstanceCheck, Label
from models.core.instance import Attributes, InvalidInstance
from models.core.params import VALUE_LIMIT, Constraint, InvalidParameter, validate_params
from models.kernels.common import Scratch, argmax_first

__all__ = [
    "CONTEXT_PARAMS",
    "KINDS",
    "CannotGrow",
    "Learner",
    "Outcome",
    "Spec",
    "SpecList",
    "UnknownLabel",
    "UpdateRefused",
]

#: Every learner kind by its name, filled as each learner class is defined.
KINDS: dict[str, type[Learner]] = {}

#: Parameters the serving model supplies rather than the spec.
CONTEXT_PARAMS = ("labels", "n_features", "n_experts")


class Outcome(NamedTuple):
    """What one trial did.

    ``mistake``: the prediction differed from the label. ``updated``: the update rule fired
    and changed the hypothesis (an update over an all-zero instance changes nothing and is
    not counted). The two differ for rules that also update on small correct margins.
    """

    mistake: bool
    updated: bool


class CannotGrow(ValueError):
    """A learner that cannot take the new inputs or labels asked of it (see
    :meth:`Learner.grown`)."""


class UnknownLabel(InvalidInstance):
    """A label that is not one of the learner's labels."""


class UpdateRefused(OverflowError):
    """A trial whose update the learner refused, whole: its state is as before the trial.

    ``predicted`` is the class index the learner predicted on that trial (what
    :meth:`Learner.trial` would have returned), so the trial can still be judged.
    """

    def __init__(self, message: str, predicted: int) -> None:
        super().__init__(message)
        self.predicted = int(predicted)


@functools.cache
def _parameters(init: Any) -> dict[str, inspect.Parameter]:
    """An ``__init__``'s parameters but ``self`` (built and learners restored by the
    thousand, where ``inspect.signature`` costs some 0.4 ms a call)."""
    return {k: p for k, p in inspect.signature(init).parameters.items() if k != "self"}


def _plain(value: Any) -> Any:
    """A JSON-able copy of a parameter value."""
    if isinstance(value, Learner):  # a nested learner: its wrapper supplies the context
        return {k: v for k, v in value.spec().items() if k not in CONTEXT_PARAMS}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    return value


class Learner:
    """Base class of every learner and wrapper.

    Subclasses set ``kind``, ``input_kind`` (``"attributes"`` or ``"experts"``),
    ``value_range`` (the allowed range of instance values: by default within
    :data:`~models.core.params.VALUE_LIMIT`, as far as the learner's arithmetic is shown to
    stay finite; None for any finite real) and ``_parameter_constraints``, store their
    parameters in ``__init__`` and then call ``self._initialise()``.
    """

    kind: ClassVar[str]
    input_kind: str
    value_range: tuple[float, float] | None = (-VALUE_LIMIT, VALUE_LIMIT)
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {}
    #: learned arrays: attribute name -> dtype; shapes come from ``_array_shapes``.
    _state_arrays: ClassVar[dict[str, str]] = {}

    labels: tuple[Label, ...]
    trials_: int
    _work: Scratch
    mistakes_: int
    updates_: int
    version_: int

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A class that names its own ``kind`` is registered under it."""
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("kind")
        if isinstance(kind, str):
            if kind in KINDS:
                raise TypeError(f"two learner classes of kind {kind!r}")
            KINDS[kind] = cls

    # -- construction ---------------------------------------------------------------

    def _initialise(self) -> None:
        validate_params(self._parameter_constraints, self.get_params())
        self.labels = tuple(self.labels)
        self._class = {label: c for c, label in enumerate(self.labels)}
        self._check_params()
        self._check = InstanceCheck(
            self.kind, self.input_kind, self.input_size, len(self.labels), self.value_range
        )
        self.reset()
        self._refuses = self.can_refuse()

    def _check_params(self) -> None:
        """Cross-parameter checks; raise InvalidParameter."""

    @classmethod
    def input_kind_for(cls, params: Mapping[str, Any]) -> str:
        """The input kind a learner built from ``params`` takes (wrappers: their inner's)."""
        return cls.input_kind

    @classmethod
    def param_names(cls) -> list[str]:
        return list(_parameters(cls.__init__))

    @classmethod
    def param_defaults(cls) -> dict[str, Any]:
        return {
            name: p.default
            for name, p in _parameters(cls.__init__).items()
            if p.default is not inspect.Parameter.empty
        }

    def get_params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.param_names()}

    def spec(self) -> dict[str, Any]:
        """The declarative spec that rebuilds this learner (JSON-able)."""
        return {"kind": self.kind, **{k: _plain(v) for k, v in self.spec_params().items()}}

    def spec_params(self) -> dict[str, Any]:
        """The parameters as :meth:`spec` shows them: as given, but nested learners as
        built (their defaults filled in)."""
        return self.get_params()

    def clone(self) -> Learner:
        """A fresh, untrained learner with the same parameters."""
        return type(self)(**self.get_params())

    # -- a larger input, more labels -------------------------------------------------
    # A learner grows as if the new inputs had been there from its first trial and had
    # never been active: a new coordinate takes the value an untouched one has now (its
    # initial weight, moved only by the rescales that move every weight), so a learner
    # grown now and one built larger from the start agree after the same trials. New
    # labels come after the old ones and change no weight; the input grows with their
    # sub-experts (see models.inputs.space).

    def grown(
        self, size: int, old_at: Sequence[int] | np.ndarray, labels: Sequence[Label] | None = None
    ) -> Learner:
        """A copy of this learner over ``size`` input coordinates, its coordinate i moved
        to ``old_at[i]`` (strictly increasing), and over ``labels`` when given (these
        labels first, in order, then the new ones).

        Raises :class:`CannotGrow` when this kind (or these parameters) cannot take the
        change; this learner is never changed.
        """
        at = np.asarray(old_at, dtype=np.int64)
        n = self.input_size
        if at.shape != (n,) or (n and (at[0] < 0 or at[-1] >= size)) or (np.diff(at) <= 0).any():
            raise CannotGrow(f"{n} coordinates cannot move into {size} in that order")
        new_labels = tuple(self.labels if labels is None else labels)
        if new_labels[: len(self.labels)] != self.labels:
            raise CannotGrow("new labels must come after the learner's own, in order")
        if len(new_labels) > len(self.labels) and self.fixed_labels:
            raise CannotGrow(f"{self.kind} has exactly {len(self.labels)} labels")
        params = self.get_params()
        params["n_features" if self.input_kind == "attributes" else "n_experts"] = size
        if "labels" in params:
            params["labels"] = new_labels
        self._can_grow()
        try:
            fresh = type(self)(**params)
        except InvalidParameter as exc:
            raise CannotGrow(str(exc)) from None
        fresh._adopt(self, at)
        fresh.version_ += 1
        return fresh

    def _adopt(self, old: Learner, at: np.ndarray) -> None:
        """:meth:`_take`, and ``old``'s counters."""
        self._take(old, at)
        self.trials_, self.mistakes_ = old.trials_, old.mistakes_
        self.updates_, self.version_ = old.updates_, old.version_

    #: True for learners whose labels are fixed by their form (binary learners).
    fixed_labels: ClassVar[bool] = False

    def _can_grow(self) -> None:
        """Raise :class:`CannotGrow` when these parameters cannot take a larger input."""
        if type(self)._take is Learner._take:
            raise CannotGrow(f"{self.kind} cannot take new inputs or labels yet")

    def _take(self, old: Learner, at: np.ndarray) -> None:
        """Take ``old``'s learned state into this fresh, larger learner (see :meth:`grown`)."""
        raise CannotGrow(f"{self.kind} cannot take new inputs or labels yet")

    def silent_rows(self) -> np.ndarray:
        """The linear rows (see :meth:`linear_rows`) of a coordinate no trial has moved."""
        raise TypeError(f"{self.kind} has no linear hypothesis")

    def reset(self) -> None:
        self.trials_ = 0
        self.mistakes_ = 0
        self.updates_ = 0
        self.version_ = 0
        self._reset_state()

    def _reset_state(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    # -- labels and instances -----------------------------------------------------

    @property
    def n_classes(self) -> int:
        return len(self.labels)

    def class_of(self, label: Label) -> int:
        try:
            if label.__class__ is bool:  # True == 1 would otherwise pass as the label 1
                raise KeyError(label)
            return self._class[label]
        except (KeyError, TypeError):
            raise UnknownLabel(
                f"unknown label {label!r}: expected one of {list(self.labels)}"
            ) from None

    @property
    def input_size(self) -> int:  # pragma: no cover - interface
        """The number of attributes or sub-experts an instance may have."""
        raise NotImplementedError

    def coerce(self, x: Any) -> Any:
        """Convert ``x`` to this learner's instance form and check its size and range."""
        return self._check(x)

    def fits_all(self, xs: Sequence[Any]) -> bool:
        """Whether :meth:`coerce` would return each of ``xs`` as it is: all instances of
        this learner's form that fit, checked together."""
        return type(self).coerce is Learner.coerce and self._check.fits_all(xs)

    def coerce_each(self, xs: Iterable[Any]) -> list[Any]:
        """:meth:`coerce` of each of ``xs``, checked together when they all fit, else
        one by one (the first that does not raises)."""
        items = list(xs)
        return items if self.fits_all(items) else [self.coerce(x) for x in items]

    # -- the trial ----------------------------------------------------------------

    def scores(self, x: Any) -> np.ndarray:
        """One score per label, in label order; the prediction is their first arg-max."""
        return self._scores(self.coerce(x))

    def predict(self, x: Any) -> Label:
        return self.labels[self._predict(self.coerce(x))]

    def decide(self, x: Any) -> tuple[int, np.ndarray]:
        """The class index of :meth:`predict`'s label and :meth:`scores`, ``x`` checked
        once."""
        return self._decide(self.coerce(x))

    def decide_many(self, xs: Sequence[Any]) -> list[tuple[int, np.ndarray]]:
        """:meth:`decide` of each of ``xs``, all by the same hypothesis."""
        return self._decide_many(self.coerce_each(xs))

    def learn(self, x: Any, y: Label) -> Outcome:
        """Predict ``x``, compare with ``y`` and apply the update rule."""
        predicted, updated = self.trial(x, y)
        return Outcome(predicted != self._class[y], updated)

    def trial(self, x: Any, y: Label) -> tuple[int, bool]:
        """:meth:`learn`, returning the class index it predicted and whether it updated.

        A trial is all or nothing: one that raises :class:`UpdateRefused` leaves the whole
        state as it was.
        """
        x = self.coerce(x)
        c = self.class_of(y)
        if self._refuses and not self._checks_first:
            predicted, updated, _ = self._undoable(x, c, False)
            return predicted, updated
        return self._counted(x, c)

    def trial_with_undo(self, x: Any, y: Label) -> tuple[int, bool, Any]:
        """:meth:`trial`, also returning a token that :meth:`rollback` takes to undo it.

        Wrappers use it to undo members that learned before another member refused.
        """
        x = self.coerce(x)
        return self._undoable(x, self.class_of(y), True)

    def _counted(self, x: Any, c: int) -> tuple[int, bool]:
        predicted, updated = self._learn(x, c)
        self.count(predicted != c, updated)
        return predicted, updated

    def count(self, mistake: bool, updated: bool, changes: int = 0) -> None:
        """Count one trial. The trial, mistake and update counters move here and nowhere
        else; an update is a change of hypothesis, so it moves ``version_`` too, as do
        the trial's other ``changes`` (see :meth:`moved`)."""
        self.trials_ += 1
        if mistake:
            self.mistakes_ += 1
        if updated:
            self.updates_ += 1
            self.version_ += 1
        self.version_ += changes

    def count_run(self, mistakes: np.ndarray, updates: np.ndarray) -> None:
        """:meth:`count` of each trial of a run learned together, its mistake and update
        flags in ``mistakes`` and ``updates``."""
        n_upd = int(np.count_nonzero(updates))
        self.trials_ += int(mistakes.shape[0])
        self.mistakes_ += int(np.count_nonzero(mistakes))
        self.updates_ += n_upd
        self.version_ += n_upd

    def moved(self, changes: int = 1) -> None:
        """Count changes of hypothesis besides a trial's own update (a recycled update,
        an average that moves with its learner)."""
        self.version_ += changes

    def _undoable(self, x: Any, c: int, whole: bool) -> tuple[int, bool, Any]:
        undo = self.checkpoint(x, whole)
        self._journal = undo[2]
        try:
            predicted, updated = self._counted(x, c)
        except UpdateRefused as exc:
            self.rollback(undo)
            raise UpdateRefused(str(exc), self._predict(x)) from None
        finally:
            self._journal = None
        return predicted, updated, undo

    def learn_many(self, xs: Iterable[Any], ys: Sequence[Label]) -> tuple[np.ndarray, np.ndarray]:
        """Learn a sequence of trials in order; return the (mistake, updated) flags.

        Every instance and label is checked before the first trial is applied.
        """
        items = self.coerce_each(xs)
        if len(items) != len(ys):
            raise InvalidInstance(f"{len(items)} instances but {len(ys)} labels")
        for y in ys:
            self.class_of(y)
        out = [self.learn(x, y) for x, y in zip(items, ys, strict=True)]
        return (
            np.array([o.mistake for o in out], dtype=bool),
            np.array([o.updated for o in out], dtype=bool),
        )

    def _scores(self, x: Any) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def _predict(self, x: Any) -> int:
        return int(argmax_first(self._scores(x)))

    def _decide(self, x: Any) -> tuple[int, np.ndarray]:
        return self._predict(x), self._scores(x)

    def _decide_many(self, xs: list[Any]) -> list[tuple[int, np.ndarray]]:
        return [self._decide(x) for x in xs]

    def _scratch(self, m: int) -> tuple[np.ndarray, np.ndarray]:
        """This learner's scratch space for a compiled trial over m non-zeros."""
        try:
            return self._work.get(len(self.labels), m)
        except AttributeError:
            self._work = Scratch()
            return self._work.get(len(self.labels), m)

    def _learn(self, x: Any, c: int) -> tuple[int, bool]:  # pragma: no cover - interface
        """Apply one trial to a coerced instance and class; return (predicted class, updated)."""
        raise NotImplementedError

    # -- refusals ----------------------------------------------------------------------
    # A learner that may refuse an update (``can_refuse``) keeps its trials atomic: basic
    # learners check before they change anything (``_checks_first``); wrappers take a
    # checkpoint before the trial and roll back to it on a refusal. A checkpoint holds the
    # counters, what ``_save`` keeps (what one trial on the instance may change in this
    # learner's own arrays) and a journal of the undo tokens its members' trials leave
    # (``_journal`` while the trial runs).

    #: True when ``_learn`` refuses before it changes anything.
    _checks_first: ClassVar[bool] = False
    _refuses: bool = False
    _journal: list[tuple[Learner, Any]] | None = None

    def can_refuse(self) -> bool:
        """Whether some trial may raise :class:`UpdateRefused` (fixed by the parameters)."""
        return False

    def rescales(self) -> bool:
        """Whether a trial may change state outside ``support`` (a global rescale)."""
        return False

    def checkpoint(self, x: Any, whole: bool = True) -> tuple[Any, ...]:
        """What one trial on the coerced ``x`` may change, for :meth:`rollback`.

        ``whole`` False: the token need only undo a trial that this learner refuses.
        """
        counters = (self.trials_, self.mistakes_, self.updates_, self.version_)
        return counters, self._save(x, whole), []

    def rollback(self, undo: tuple[Any, ...]) -> None:
        """Restore the state a :meth:`checkpoint` holds (later trials undone first)."""
        counters, saved, journal = undo
        for member, token in reversed(journal):
            member.rollback(token)
        self._restore(saved)
        self.trials_, self.mistakes_, self.updates_, self.version_ = counters

    def _save(self, x: Any, whole: bool) -> Any:
        return self._save_at(self.support(x))

    def _restore(self, saved: Any) -> None:
        self._restore_at(saved)

    def _save_at(self, idx: np.ndarray) -> Any:
        """The learned arrays trials over coordinates ``idx`` may change; by default a copy
        of every one (basic learners whose trials stay on ``idx`` keep those rows only)."""
        state = self.kernel_state()
        arrays = state[1:3] if state else [getattr(self, n) for n in self._state_arrays]
        return [(a, a.copy()) for a in arrays]

    def _restore_at(self, saved: Any) -> None:
        for live, copy in saved:
            live[...] = copy

    def _member_learns(self, member: Learner, x: Any, y: Label) -> Outcome:
        """One trial of a member, journalled when a checkpoint of this learner is open."""
        journal = self._journal
        if journal is None:
            return member.learn(x, y)
        predicted, updated, undo = member.trial_with_undo(x, y)
        journal.append((member, undo))
        return Outcome(predicted != member.class_of(y), updated)

    # -- the linear view, for averaging ----------------------------------------------
    # A linear learner's hypothesis is H = g * sum_r coef_r * b_r: rows b of per-coordinate
    # values, fixed coefficients and a global scale g. A trial changes b only on
    # ``support(x)``, unless ``linear_epoch()`` moves (a global rescale of b).

    def support(self, x: Any) -> np.ndarray:
        """The coordinates a trial on ``x`` may change."""
        return x.indices if isinstance(x, Attributes) else x.expert

    def linear_rows(self, idx: np.ndarray | None = None) -> np.ndarray:
        """The rows b at coordinates ``idx`` (all when None), shape (rows, len(idx))."""
        raise TypeError(f"{self.kind} has no linear hypothesis to average")

    def linear_coef(self) -> np.ndarray:
        raise TypeError(f"{self.kind} has no linear hypothesis to average")

    def linear_scale(self) -> float:
        return 1.0

    def linear_epoch(self) -> int:
        return 0

    def linear_shift(self) -> float:
        """log2 of the factor b was divided by in all, when the learner shrinks its
        weights to stay in range without changing its predictions (Balanced Winnow)."""
        return 0.0

    def kernel_state(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray] | None:
        """``(family, W, S, P)`` views of the live state for compiled wrappers
        (models.kernels.dispatch), or None for learners without a compiled trial."""
        return None

    def snapshot(self) -> Hypothesis:  # pragma: no cover - interface
        raise NotImplementedError

    # -- state ---------------------------------------------------------------------

    def _array_shapes(self) -> dict[str, tuple[int, ...]]:  # pragma: no cover - interface
        raise NotImplementedError

    def _check_state(self) -> None:
        """Semantic checks after import (e.g. positive weights); raise InvalidState."""

    def _export_extra(self) -> dict[str, Any]:
        """Nested state of wrapped learners, keyed by role."""
        return {}

    def _import_extra(self, children: Mapping[str, Any]) -> None:
        if children:
            raise st.InvalidState(f"{self.kind}: unexpected children {sorted(children)}")

    def counters(self) -> dict[str, int]:
        return {
            "trials": self.trials_,
            "mistakes": self.mistakes_,
            "updates": self.updates_,
            "version": self.version_,
        }

    def export_state(self) -> dict[str, Any]:
        """The whole state as a versioned document of plain values and encoded arrays."""
        return {
            "format": st.FORMAT,
            "version": st.VERSION,
            "kind": self.kind,
            "params": self.spec(),
            "counters": self.counters(),
            "arrays": {name: st.encode_array(getattr(self, name)) for name in self._state_arrays},
            "children": self._export_extra(),
        }

    def import_state(self, doc: Any) -> None:
        """Replace the learned state with the one in ``doc`` (from the same spec).

        The document is read into a fresh copy first, so a document that turns out to be
        invalid part-way (in a nested learner, say) leaves this learner untouched.
        """
        staged = self.clone()
        staged._load_state(doc)
        self.__dict__.update(staged.__dict__)

    def _load_state(self, doc: Any) -> None:
        doc = st.expect_keys(
            doc, "state", {"format", "version", "kind", "params", "counters", "arrays", "children"}
        )
        version = doc["version"]
        if doc["format"] != st.FORMAT or type(version) is not int or version != st.VERSION:
            raise st.InvalidState(
                f"state: expected format {st.FORMAT!r} version {st.VERSION}, "
                f"got {doc['format']!r} version {version!r}"
            )
        if doc["kind"] != self.kind or not st.same_spec(doc["params"], self.spec()):
            raise st.InvalidState(f"state: made by {doc['params']!r}, not by {self.spec()!r}")
        counters = st.expect_keys(
            doc["counters"], "state.counters", {"trials", "mistakes", "updates", "version"}
        )
        for name, value in counters.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise st.InvalidState(f"state.counters.{name}: expected an integer >= 0")
        arrays = st.expect_keys(doc["arrays"], "state.arrays", set(self._state_arrays))
        shapes = self._array_shapes()
        loaded = {
            name: st.decode_array(arrays[name], f"state.arrays.{name}", dtype, shapes[name])
            for name, dtype in self._state_arrays.items()
        }
        for name, arr in loaded.items():
            setattr(self, name, arr)
        self._check_state()
        if not isinstance(doc["children"], Mapping):
            raise st.InvalidState("state.children: expected an object")
        self._import_extra(doc["children"])
        self.trials_ = counters["trials"]
        self.mistakes_ = counters["mistakes"]
        self.updates_ = counters["updates"]
        self.version_ = counters["version"]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.spec().items() if k != "kind")
        return f"{type(self).__name__}({args})"


@dataclass(frozen=True)
class Spec(Constraint):
    """A nested learner: a spec mapping with a ``kind``, or a learner object."""

    def describe(self) -> str:
        return 'a learner spec such as {"kind": "balanced-winnow"}'

    def check(self, value: Any) -> str | None:
        if isinstance(value, Learner):
            return None
        if isinstance(value, Mapping) and isinstance(value.get("kind"), str):
            return None
        return self.describe()


@dataclass(frozen=True)
class SpecList(Constraint):
    """A non-empty list of nested learners (specs with a ``kind``, or learner objects)."""

    maximum: int = 1000

    def describe(self) -> str:
        return 'a non-empty list of learner specs such as [{"kind": "committee"}]'

    def check(self, value: Any) -> str | None:
        if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
            return self.describe()
        if not 1 <= len(value) <= self.maximum or any(Spec().check(v) for v in value):
            return self.describe()
        return None
