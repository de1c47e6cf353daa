"""Voting over on-line hypotheses: V-B and V-Combine (ALGORITHMS.md §3.2; S4 §V.B).

The pure functions of :mod:`models.schedule` give the schedule arithmetic: :func:`targets`,
:func:`window`, :func:`creation_spacing`, :func:`live_window` and :func:`restart_wait`
(re-exported here).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from models import state as st
from models._kernels import argmax_first
from models.averaging import Averaging
from models.base import Hypothesis, Label, Learner
from models.instance import Attributes, Experts, InvalidInstance
from models.params import (
    MAX_SIZE,
    Bool,
    Constraint,
    Integer,
    InvalidParameter,
    Labels,
    Options,
    Real,
    Spec,
)
from models.recycling import Recycling
from models.schedule import (
    SlotView,
    _higher,
    _Slot,
    creation_spacing,
    live_window,
    restart_wait,
    targets,
    window,
)
from models.voting_fast import CompiledMembers
from models.voting_state import (
    _CLASSES,
    VotingHypothesis,
    _effective,
    _fields,
    _Packed,
    _rebuild,
    _vote,
)
from models.wrapper import inner_spec

__all__ = [
    "SlotView",
    "VCombine",
    "VotingHypothesis",
    "creation_spacing",
    "live_window",
    "restart_wait",
    "targets",
    "window",
]


# -- nested learners that follow another member --------------------------------------------


def _followers(specs: Sequence[Mapping[str, Any]]) -> dict[int, int]:
    """Averaging members whose inner learner is another member: {averaged: that member}.

    An AR-B beside its R-B would otherwise train a second, identical R-B; instead the
    averaged member follows the other member's trials.
    """
    out = {}
    for j, spec in enumerate(specs):
        if spec.get("kind") == "averaging" and spec.get("learner") in specs:
            out[j] = list(specs).index(spec["learner"])
    return out


def _link(learners: list[Learner], followers: Mapping[int, int]) -> None:
    for j, i in followers.items():
        averaged = learners[j]
        assert isinstance(averaged, Averaging)
        averaged.learner_ = learners[i]


@dataclass(frozen=True)
class _SpecList(Constraint):
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


#: slot_table_ columns: target, start, end, trial, key (learner, version), seen (learner,
#: version), c_buf, n_buf, c_on, n_on, hypothesis class code, strict.
_TABLE = 14


class VCombine(Learner):
    """V-Combine: vote over spaced hypotheses of the best of v learners (V-B when v = 1).

    Every learner learns each trial from its own prediction. The voters are the h slots'
    hypotheses plus the current hypothesis of the *best* learner B, the one with the fewest
    mistakes so far (``select="fewest-mistakes"``, ties to list order, A11). Slot targets are
    j * s, j = 1..h; after trial tau = h * s the spacing s doubles, even multiples of the old
    spacing are kept and the new targets (h/2+1..h) * s are created. Each target has a window
    of m + 1 trials, m = min(W, floor(s/2)) with s the spacing when the target was created
    (A17). At the window start B's current hypothesis is saved (a snapshot) and votes at once;
    at each later window trial a new hypothesis of B (a new (learner, version) pair) replaces
    it if its estimate is strictly higher. The estimate (A3) is correct/tried over the r most
    recent labelled trials, scored when the hypothesis is considered, plus (with
    ``accuracy="buffer+online"``) its record on the trials it predicted while it was B's
    current hypothesis and its window was open.

    Class j's vote is the sum of the voters' score vectors, raw (``vote_normalize="none"``,
    S4) or each divided by its l1 norm or largest magnitude first (A12). The output is B's
    prediction if M_B < M_V, else the vote's, where M_V counts the vote's mistakes and M_B the
    mistakes of the learner that is B at that trial, both since the last restart (A5). From
    tau >= d * 2^rho (rho restarts so far) the restart condition M_B < M_V is checked after
    every trial (A4); a restart discards the slots and resets tau, s, M_B and M_V, never the
    learners. Trial order as in §3.2 "Order of operations".

    ``select="weighted-majority"`` chooses B instead as the learner with the largest weight
    of a Weighted Majority over the learners (LW94, §2.8), ties to list order: weights start
    at 1 and the learners that predicted wrongly are multiplied by ``beta``, on every trial
    (``wm_update="every_trial"``) or only on trials where the weighted vote of the learners'
    predicted labels was wrong (``"on_mistake"``). With every-trial updates and beta > 0 the
    weights are beta^mistakes, so B is again the learner with the fewest mistakes; the
    on-mistake variant gives a different choice. WM only selects B, it never predicts.

    A trial costs O((v + h) m) plus, at window trials with a new hypothesis, O(r m) for its
    estimate and O(n) for a snapshot. ``updated`` is True when a learner updated, a slot
    changed, or the choice of B or between B and the vote changed: whenever the frozen
    predictor (:meth:`snapshot`) may have changed, so ``version_`` moves with it. A learner
    that raises mid-trial (an overflow) leaves the learners before it trained.

    Parameters
    ----------
    learners
        Specs of the v learners, all over attributes or all over sub-experts; each is built
        with the wrapper's labels and size.
    h
        Number of slots, even.
    r
        Number of recent trials kept for accuracy estimates.
    window
        W, the largest window size.
    restart_wait
        d, the first wait before restarts are checked.
    accuracy
        ``"buffer+online"`` or ``"buffer"``.
    vote_normalize
        ``"none"``, ``"l1"`` or ``"maxabs"``.
    select
        ``"fewest-mistakes"`` or ``"weighted-majority"``.
    beta, wm_update
        The Weighted Majority selector's penalty factor in [0, 1) and update variant.
    restarts
        Whether to restart the voting.
    labels, n_features, n_experts
        Supplied by the model; every learner gets the same.

    Examples
    --------
    >>> vb = VCombine([{"kind": "perceptron"}], h=4, labels=["+", "-"], n_features=2)
    >>> for t in range(5):
    ...     _ = vb.learn([1.0, 0.0] if t % 2 else [0.0, 1.0], "+" if t % 2 else "-")
    >>> [(s.target, s.trial) for s in vb.schedule]
    [(2, 2), (4, 4), (6, 0), (8, 0)]
    """

    kind = "v-combine"
    #: Run trials through :mod:`models.voting_fast` when the members allow it; False keeps
    #: the composed reference path (the two agree bit for bit).
    _compiled = True
    _parameter_constraints = {
        "learners": _SpecList(),
        "h": Integer(2, 100_000),
        "r": Integer(0, 100_000),
        "window": Integer(0, 2**40),
        "restart_wait": Integer(1, 2**40),
        "accuracy": Options(("buffer+online", "buffer")),
        "vote_normalize": Options(("none", "l1", "maxabs")),
        "select": Options(("fewest-mistakes", "weighted-majority")),
        "beta": Real(0.0, 1.0, high_open=True),
        "wm_update": Options(("every_trial", "on_mistake")),
        "restarts": Bool(),
        "labels": Labels(),
        "n_features": Integer(1, MAX_SIZE, optional=True),
        "n_experts": Integer(1, MAX_SIZE, optional=True),
    }
    #: Per learner: total mistakes, mistakes since the last restart, WM weight; scalars_ =
    #: [tau, spacing, restarts, vote mistakes since the last restart]; the slots (a table, the
    #: hypotheses' reals and one weight row per held slot, in slot order) and the r-buffer
    #: (labels, offsets into the concatenated index and value arrays), oldest first.
    _state_arrays = {
        "wm_weights_": "float64",
        "learner_mistakes_": "int64",
        "recent_mistakes_": "int64",
        "scalars_": "int64",
        "slot_table_": "int64",
        "slot_reals_": "float64",
        "slot_weights_": "float64",
        "buffer_labels_": "int64",
        "buffer_offsets_": "int64",
        "buffer_index_": "int64",
        "buffer_values_": "float64",
    }

    def __init__(
        self,
        learners: Sequence[Mapping[str, Any] | Learner],
        h: int = 20,
        r: int = 100,
        window: int = 100,
        restart_wait: int = 100,
        accuracy: str = "buffer+online",
        vote_normalize: str = "none",
        select: str = "fewest-mistakes",
        beta: float = 0.5,
        wm_update: str = "every_trial",
        restarts: bool = True,
        labels: Sequence[Label] = (1, -1),
        n_features: int | None = None,
        n_experts: int | None = None,
    ) -> None:
        self.learners: Any = learners
        self.h = h
        self.r = r
        self.window = window
        self.restart_wait = restart_wait
        self.accuracy = accuracy
        self.vote_normalize = vote_normalize
        self.select = select
        self.beta = beta
        self.wm_update = wm_update
        self.restarts = restarts
        self.labels = labels  # type: ignore[assignment]
        self.n_features = n_features
        self.n_experts = n_experts
        self._initialise()

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def input_kind_for(cls, params: Mapping[str, Any]) -> str:
        from models.registry import kind_of

        learners = params.get("learners")
        expected = _SpecList().check(learners)
        if expected:
            raise InvalidParameter("learners", learners, expected)
        kinds = []
        for i, item in enumerate(learners):  # type: ignore[arg-type]
            try:
                kinds.append(
                    item.input_kind
                    if isinstance(item, Learner)
                    else kind_of(item).input_kind_for(item)
                )
            except InvalidParameter as exc:
                raise InvalidParameter(
                    f"learners[{i}].{exc.name}", exc.value, exc.expected
                ) from None
        if len(set(kinds)) > 1:
            raise InvalidParameter(
                "learners", kinds, "learners that all take attributes or all take sub-experts"
            )
        return kinds[0]

    @property
    def input_size(self) -> int:
        return int((self.n_features if self.input_kind == "attributes" else self.n_experts) or 0)

    def _check_params(self) -> None:
        from models.registry import build

        if self.h % 2:
            raise InvalidParameter("h", self.h, "an even integer >= 2")
        kind = self.input_kind_for({"learners": self.learners})
        given, other = ("n_features", "n_experts")
        if kind != "attributes":
            given, other = other, given
        if getattr(self, given) is None or getattr(self, other) is not None:
            raise InvalidParameter(
                given, getattr(self, given), f"an integer (and {other} null) for {kind} learners"
            )
        self.input_kind = kind  # type: ignore[misc]
        specs, built, checks, codes = [], [], [], []
        for i, item in enumerate(self.learners):
            try:
                inner = build(inner_spec(item), labels=self.labels, size=getattr(self, given))
            except InvalidParameter as exc:
                raise InvalidParameter(
                    f"learners[{i}].{exc.name}", exc.value, exc.expected
                ) from None
            probe = inner.snapshot()
            if type(probe) not in _CLASSES:  # slots must be able to export it
                raise InvalidParameter(
                    f"learners[{i}]", inner_spec(inner), "a learner with a linear hypothesis"
                )
            specs.append(inner_spec(inner))
            built.append(inner)
            checks.append(probe.check)
            codes.append(_fields(probe)[0])
        self.learners = specs
        self.learners_: list[Learner] = built
        self._checks, self._codes = checks, codes
        ranges = [inner.value_range or (-np.inf, np.inf) for inner in built]
        low, high = max(lo for lo, _ in ranges), min(hi for _, hi in ranges)
        self.value_range = None if (low, high) == (-np.inf, np.inf) else (low, high)  # type: ignore[misc]
        self._online = self.accuracy == "buffer+online"
        self._wm = self.select == "weighted-majority"
        self._followers = _followers(self.learners)
        _link(self.learners_, self._followers)

    def _reset_state(self) -> None:
        for inner in self.learners_:
            inner.reset()
        v = len(self.learners_)
        self.learner_mistakes_ = np.zeros(v, dtype=np.int64)
        self.recent_mistakes_ = np.zeros(v, dtype=np.int64)
        self.wm_weights_ = np.ones(v)
        self.scalars_ = np.array([0, 1, 0, 0], dtype=np.int64)
        self.buffer_: deque[tuple[Any, int]] = deque(maxlen=self.r)
        self.slots_ = self._initial_slots()
        self._loaded: dict[str, np.ndarray] = {}
        self._fast: CompiledMembers | None = None  # built at the next trial
        self._fast_tried = False

    def _initial_slots(self) -> list[_Slot]:
        return [_Slot(t, *window(t, 1, self.window)) for t in targets(1, self.h)]

    # -- read-only views ---------------------------------------------------------------------

    @property
    def tau_(self) -> int:
        """Trials since the last (re)start."""
        return int(self.scalars_[0])

    @property
    def spacing_(self) -> int:
        return int(self.scalars_[1])

    @property
    def restarts_(self) -> int:
        return int(self.scalars_[2])

    @property
    def vote_mistakes_(self) -> int:
        """M_V: the vote's mistakes since the last restart."""
        return int(self.scalars_[3])

    @property
    def best_(self) -> int:
        """The index of the learner B whose current hypothesis votes and may predict."""
        if self._wm:
            return int(np.argmax(self.wm_weights_))
        return int(np.argmin(self.learner_mistakes_))

    @property
    def best_mistakes_(self) -> int:
        """M_B: B's mistakes since the last restart."""
        return int(self.recent_mistakes_[self.best_])

    @property
    def uses_best_(self) -> bool:
        """Whether the next prediction is B's (M_B < M_V) rather than the vote's."""
        return self.best_mistakes_ < self.vote_mistakes_

    @property
    def schedule(self) -> tuple[SlotView, ...]:
        """The current targets in order, their windows and the hypotheses they hold."""
        return tuple(
            SlotView(s.target, s.start, s.end, True, s.trial, *s.key)
            if s.hypothesis is not None
            else SlotView(s.target, s.start, s.end, False, 0, -1, -1)
            for s in self.slots_
        )

    @property
    def slot_hypotheses(self) -> tuple[Hypothesis, ...]:
        return tuple(s.hypothesis for s in self.slots_ if s.hypothesis is not None)

    # -- prediction -------------------------------------------------------------------------

    def _vote_of(self, x: Any, current: np.ndarray) -> np.ndarray:
        scores = [s.hypothesis.scores(x) for s in self.slots_ if s.hypothesis is not None]
        scores.append(current)
        return _vote(scores, self.vote_normalize, self.n_classes)

    def vote_scores(self, x: Any) -> np.ndarray:
        """The vote V (slots plus B's current hypothesis), whichever rule predicts."""
        x = self.coerce(x)
        return self._vote_of(x, self.learners_[self.best_].scores(x))

    def _scores(self, x: Any) -> np.ndarray:
        current = self.learners_[self.best_].scores(x)
        return current if self.uses_best_ else self._vote_of(x, current)

    def _predict(self, x: Any) -> int:
        if self.uses_best_:
            return self._class[self.learners_[self.best_].predict(x)]
        return int(argmax_first(self._scores(x)))

    def snapshot(self) -> Hypothesis:
        """The frozen rule in force (§5.2): B's hypothesis if M_B < M_V, else the vote."""
        current = self.learners_[self.best_].snapshot()
        if self.uses_best_:
            return current
        return VotingHypothesis(
            [*self.slot_hypotheses, current], self.vote_normalize, self.labels, self._check
        )

    def weights(self) -> np.ndarray:
        """The effective weights of :meth:`snapshot` (see :class:`VotingHypothesis`)."""
        return np.array(_effective(self.snapshot()))

    # -- the trial ---------------------------------------------------------------------------

    def _learn(self, x: Any, c: int) -> tuple[int, bool]:
        fast = self._compiled_members(x)
        b = self.best_
        current = self.learners_[b]
        key = (b, current.version_)
        use_best = self.uses_best_
        if fast is not None:
            fast.pack_slots(self)
            failed, voted, best_predicted = fast.trial(x, c, b)
            predicted = best_predicted if use_best else voted
            wrong, changed = fast.settle(self, c, failed)
            changed |= self._finish(x, c, key, voted, wrong, None)
            return predicted, changed or (self.best_, self.uses_best_) != (b, use_best)
        voted = int(argmax_first(self._vote_of(x, current.scores(x))))
        predicted = current._predict(x) if use_best else voted
        picks = (
            [inner._predict(x) for inner in self.learners_]
            if self._wm and self.wm_update == "on_mistake"
            else None
        )
        y = self.labels[c]
        follow = self._followers
        before = {j: self.learners_[j]._predict(x) for j in follow}  # before the leaders learn
        done = {i: inner.learn(x, y) for i, inner in enumerate(self.learners_) if i not in follow}
        for j, i in follow.items():
            averaged = self.learners_[j]
            assert isinstance(averaged, Averaging)
            done[j] = averaged.follow(x, c, before[j], done[i].updated)
        outcomes = [done[i] for i in range(len(self.learners_))]
        wrong = np.array([o.mistake for o in outcomes], dtype=bool)
        changed = any(o.updated for o in outcomes)
        changed |= self._finish(x, c, key, voted, wrong, picks)
        return predicted, changed or (self.best_, self.uses_best_) != (b, use_best)

    def _compiled_members(self, x: Any) -> CompiledMembers | None:
        """The compiled view of the members (:mod:`models.voting_fast`), if they allow one."""
        if not self._compiled:
            return None
        if not self._fast_tried:
            self._fast, self._fast_tried = CompiledMembers.of(self), True
        fast = self._fast
        if fast is None:
            return None
        m = x.expert.shape[0]
        if not fast.fits(m):  # widen the stores as their own trials would, then look again
            for g in fast.recycled:
                inner = self.learners_[g]
                assert isinstance(inner, Recycling)
                if m > inner.items_a_.shape[1]:
                    inner._widen(m)
            fast = self._fast = CompiledMembers.of(self)
        return fast

    def _finish(
        self,
        x: Any,
        c: int,
        key: tuple[int, int],
        voted: int,
        wrong: np.ndarray,
        picks: list[int] | None,
    ) -> bool:
        """Steps 2 and 4-7 of a trial once the members have learned; True if a slot changed."""
        b, tau = key[0], self.tau_
        if self._online:  # the candidates that predicted this trial as B's hypothesis
            for s in self.slots_:
                if s.key == key and s.start <= tau < s.end:
                    s.c_on += int(not wrong[b])
                    s.n_on += 1
        self.scalars_[3] += voted != c
        self.learner_mistakes_ += wrong
        self.recent_mistakes_ += wrong
        if self._wm:
            self._penalise(wrong, picks, c)
        self.buffer_.append((x, c))
        self.scalars_[0] += 1
        return self._advance()

    def _penalise(self, wrong: np.ndarray, picks: list[int] | None, c: int) -> None:
        u = self.wm_weights_
        if picks is not None:  # on_mistake: only when the weighted vote of the labels errs
            totals = np.bincount(picks, weights=u, minlength=self.n_classes)
            if int(argmax_first(totals)) == c:
                return
        u[wrong] *= self.beta
        top = u.max()
        if 0.0 < top < 2.0**-512:  # an exact rescale by a power of two keeps every ratio
            u *= 2.0**512

    def _record(self, g: int) -> tuple[int, int]:
        """(correct, tried) of learner g's current hypothesis on the r-buffer."""
        if self._fast is not None:
            return self._fast.record(g), len(self.buffer_)
        # Buffered instances were checked on arrival, and the learners share the labels.
        inner = self.learners_[g]
        correct = sum(inner._predict(x) == c for x, c in self.buffer_)
        return int(correct), len(self.buffer_)

    def _hold(self, slot: _Slot, key: tuple[int, int], record: tuple[int, int]) -> None:
        slot.hypothesis = self.learners_[key[0]].snapshot()
        slot.trial, slot.key, slot.seen = self.tau_, key, key
        slot.c_buf, slot.n_buf = record
        slot.c_on = slot.n_on = 0

    def _advance(self) -> bool:
        """Step 5-7 after tau += 1: windows, doubling, restart. True if a slot changed."""
        tau, s, h = self.tau_, self.spacing_, self.h
        b = self.best_
        key = (b, self.learners_[b].version_)
        changed = False
        for slot in self.slots_:
            if slot.start == tau:
                self._hold(slot, key, self._record(b))
                changed = True
            elif slot.start < tau <= slot.end and slot.seen != key:
                slot.seen = key
                record = self._record(b)
                if _higher(record, slot.estimate(self._online)):
                    self._hold(slot, key, record)
                    changed = True
        if tau == h * s:  # keep the even multiples of the old spacing
            kept = [t for t in self.slots_ if (t.target // s) % 2 == 0]
            changed |= any(t.hypothesis is not None for t in self.slots_ if (t.target // s) % 2)
            s *= 2
            self.scalars_[1] = s
            new = targets(s, h)[h // 2 :]
            self.slots_ = kept + [_Slot(t, *window(t, s, self.window)) for t in new]
        if (
            self.restarts
            and tau >= restart_wait(self.restart_wait, self.restarts_)
            and self.recent_mistakes_[b] < self.scalars_[3]
        ):
            changed |= any(t.hypothesis is not None for t in self.slots_)
            self.slots_ = self._initial_slots()
            self.scalars_[:] = [0, 1, self.restarts_ + 1, 0]
            self.recent_mistakes_[:] = 0
        return changed

    # -- state ---------------------------------------------------------------------------------
    # The slots and the r-buffer live as objects; their arrays are packed when exported and
    # rebuilt, after validation, when imported (``_Packed``).

    slot_table_ = _Packed()
    slot_reals_ = _Packed()
    slot_weights_ = _Packed()
    buffer_labels_ = _Packed()
    buffer_offsets_ = _Packed()
    buffer_index_ = _Packed()
    buffer_values_ = _Packed()

    def _pack_slot_table(self) -> np.ndarray:
        return np.array([t.row() for t in self.slots_], dtype=np.int64).reshape(-1, _TABLE)

    def _pack_slot_reals(self) -> np.ndarray:
        return np.array([_fields(t.hypothesis)[2] for t in self.slots_], dtype=np.float64)

    def _pack_slot_weights(self) -> np.ndarray:
        rows = [t.hypothesis.weights for t in self.slots_ if t.hypothesis is not None]  # type: ignore[attr-defined]
        return np.array(rows, dtype=np.float64).reshape(len(rows), self.input_size)

    def _pack_buffer_labels(self) -> np.ndarray:
        return np.array([c for _, c in self.buffer_], dtype=np.int64)

    def _pack_buffer_offsets(self) -> np.ndarray:
        return np.cumsum([0] + [len(x) for x, _ in self.buffer_], dtype=np.int64)

    def _pack_buffer_index(self) -> np.ndarray:
        names = ("indices",) if self.input_kind == "attributes" else ("expert", "cls")
        cols = [[getattr(x, n) for x, _ in self.buffer_] for n in names]
        return np.stack([np.concatenate([*c, np.zeros(0, np.int64)]) for c in cols], axis=1)

    def _pack_buffer_values(self) -> np.ndarray:
        name = "values" if self.input_kind == "attributes" else "value"
        return np.concatenate([*(getattr(x, name) for x, _ in self.buffer_), np.zeros(0)])

    def _array_shapes(self) -> dict[str, tuple[int, ...]]:
        v, h = len(self.learners_), self.h
        return {
            "learner_mistakes_": (v,),
            "recent_mistakes_": (v,),
            "wm_weights_": (v,),
            "scalars_": (4,),
            "slot_table_": (h, _TABLE),
            "slot_reals_": (h,),
            "slot_weights_": (-1, self.input_size),
            "buffer_labels_": (-1,),
            "buffer_offsets_": (-1,),
            "buffer_index_": (-1, 1 if self.input_kind == "attributes" else 2),
            "buffer_values_": (-1,),
        }

    def _check_state(self) -> None:
        tau, s, rho, m_v = (int(a) for a in self.scalars_)
        if not (
            s >= 1
            and s & (s - 1) == 0
            and 0 <= tau < self.h * s
            and 0 <= rho <= 62
            and 0 <= m_v <= tau
            and (self.recent_mistakes_ >= 0).all()
            and (self.learner_mistakes_ >= 0).all()
            and (self.recent_mistakes_ <= self.learner_mistakes_).all()
            and (self.recent_mistakes_ <= tau).all()
            and ((self.wm_weights_ >= 0) & (self.wm_weights_ <= 1)).all()
        ):
            raise st.InvalidState("v-combine counters are inconsistent")

    def _export_extra(self) -> dict[str, Any]:
        return {f"learner.{i}": inner.export_state() for i, inner in enumerate(self.learners_)}

    def _import_extra(self, children: Mapping[str, Any]) -> None:
        expected = {f"learner.{i}" for i in range(len(self.learners_))}
        if set(children) != expected:
            raise st.InvalidState(f"v-combine state: expected children {sorted(expected)}")
        fresh = [inner.clone() for inner in self.learners_]
        for i, inner in enumerate(fresh):
            inner.import_state(children[f"learner.{i}"])
        _link(fresh, self._followers)
        loaded, self._loaded = self._loaded, {}
        slots = self._rebuild_slots(loaded, fresh)
        buffer = self._rebuild_buffer(loaded)
        self.learners_, self.slots_, self.buffer_ = fresh, slots, buffer
        self._fast, self._fast_tried = None, False

    def _rebuild_slots(self, loaded: dict[str, np.ndarray], fresh: list[Learner]) -> list[_Slot]:
        table, reals, weights = (loaded[n] for n in ("slot_table_", "slot_reals_", "slot_weights_"))
        tau, s = self.tau_, self.spacing_
        slots, held_rows = [], 0
        for j, row in enumerate(table.tolist()):
            t = (j + 1) * s
            slot = _Slot(t, *live_window(t, s, self.h, self.window), trial=row[3])
            slot.key, slot.seen = (row[4], row[5]), (row[6], row[7])
            slot.c_buf, slot.n_buf, slot.c_on, slot.n_on = row[8:12]
            code, strict = row[12:]
            held = slot.start <= tau
            ok = row[:3] == [t, slot.start, slot.end]
            if held:
                learner = slot.key[0]
                ok = (
                    ok
                    and held_rows < weights.shape[0]
                    and all(
                        0 <= k < len(fresh) and 0 <= u <= fresh[k].version_
                        for k, u in (slot.key, slot.seen)
                    )
                    and code == self._codes[learner]
                    and strict in (0, 1)
                    and slot.start <= slot.trial <= min(slot.end, tau)
                    and 0 <= slot.c_buf <= slot.n_buf <= self.r
                    and 0 <= slot.c_on <= slot.n_on <= tau
                )
                if ok:
                    slot.hypothesis = _rebuild(
                        code,
                        strict,
                        float(reals[j]),
                        weights[held_rows],
                        self.labels,
                        self._checks[learner],
                    )
                    held_rows += 1
            else:
                ok = ok and not any(row[3:]) and reals[j] == 0
            if not ok:
                raise st.InvalidState(
                    f"state.arrays.slot_table_[{j}]: inconsistent with the schedule"
                )
            slots.append(slot)
        if held_rows != weights.shape[0]:
            raise st.InvalidState("state.arrays.slot_weights_: one row per held slot expected")
        return slots

    def _rebuild_buffer(self, loaded: dict[str, np.ndarray]) -> deque[tuple[Any, int]]:
        labels, offsets, index, values = (
            loaded[n]
            for n in ("buffer_labels_", "buffer_offsets_", "buffer_index_", "buffer_values_")
        )
        if (
            labels.size > self.r
            or offsets.shape != (labels.size + 1,)
            or offsets[0] != 0
            or (np.diff(offsets) < 0).any()
            or offsets[-1] != values.size
            or index.shape[0] != values.size
            or ((labels < 0) | (labels >= self.n_classes)).any()
        ):
            raise st.InvalidState("state.arrays.buffer_*: inconsistent buffer")
        out: deque[tuple[Any, int]] = deque(maxlen=self.r)
        for i, c in enumerate(labels.tolist()):
            part = slice(offsets[i], offsets[i + 1])
            try:
                if self.input_kind == "attributes":
                    x: Any = Attributes(index[part, 0], values[part])
                else:
                    x = Experts(index[part, 0], index[part, 1], values[part])
                self._check.fit(x)
            except InvalidInstance as exc:
                raise st.InvalidState(f"state.arrays.buffer_*: instance {i}: {exc}") from None
            out.append((x, c))
        return out
