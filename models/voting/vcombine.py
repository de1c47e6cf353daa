"""V-Combine: voting over on-line hypotheses, V-B and V-Combine (Mesterharm & Hsu, §V.B).

The algorithm reads top to bottom in :class:`VCombine`; it composes its members
(:class:`~models.voting.members.Members`: how a trial teaches them, what is counted of them),
its schedule (:class:`~models.voting.schedule.Schedule`: the slots, windows, doubling and
restarts), the r-buffer of recent trials, and, when the members allow it, their part of a
trial run in one compiled call (:mod:`models.voting.compiled`). Its state document is packed
and checked by :mod:`models.voting.state`. The pure schedule arithmetic (:func:`targets`,
:func:`window`, :func:`creation_spacing`, :func:`live_window`, :func:`restart_wait`) is
re-exported here.

Refusals: roll back. Members learn before anything of V-Combine's own moves, the ones
that can refuse first, each leaving an undo token; so a refusal undoes only those. A
checkpoint for a wrapper that must undo a whole trial (``whole``) journals every member
and keeps V-Combine's own state too.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from models.core.hypothesis import Hypothesis, Label, LinearHypothesis
from models.core.instance import Attributes, Experts
from models.core.learner import Learner, SpecList
from models.core.nested import build_inner, check_size, import_children, inner_spec, input_kind_of
from models.core.params import (
    MAX_SIZE,
    Bool,
    Integer,
    InvalidParameter,
    Labels,
    Options,
    Real,
)
from models.kernels.common import argmax_first
from models.voting import state as vs
from models.voting.compiled import CompiledMembers
from models.voting.grow import grown_hypothesis, normalised_by_sum, untouched_weight
from models.voting.hypothesis import (
    HYPOTHESIS_CLASSES,
    VotingHypothesis,
    combine_votes,
    effective_weights,
    first_by_plain_sum,
    hypothesis_fields,
    nonnegative,
)
from models.voting.members import Members
from models.voting.schedule import (
    Schedule,
    Slot,
    SlotView,
    creation_spacing,
    live_window,
    restart_wait,
    targets,
    window,
)
from models.wrappers.recycling import Recycling

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


class VCombine(Learner):
    """V-Combine: vote over spaced hypotheses of the best of v learners (V-B when v = 1).

    Every learner learns each trial from its own prediction. The voters are the h slots'
    hypotheses plus the current hypothesis of the *best* learner B, the one with the fewest
    mistakes so far (``select="fewest-mistakes"``, ties to list order). Slot targets are
    j * s, j = 1..h; after trial tau = h * s the spacing s doubles, even multiples of the old
    spacing are kept and the new targets (h/2+1..h) * s are created. Each target has a window
    of m + 1 trials, m = min(W, floor(s/2)) with s the spacing when the target was created.
    At the window start B's current hypothesis is saved (a snapshot) and votes at once; at
    each later window trial a new hypothesis of B (a new (learner, version) pair) replaces
    it if its estimate is strictly higher. The estimate is correct/tried over the r most
    recent labelled trials, scored when the hypothesis is considered, plus (with
    ``accuracy="buffer+online"``) its record on the trials it predicted while it was B's
    current hypothesis and its window was open.

    Class j's vote is the sum of the voters' score vectors, raw (``vote_normalize="none"``,
    as the paper does) or each divided by its l1 norm or largest magnitude first. The output
    is B's prediction if M_B < M_V, else the vote's, where M_V counts the vote's mistakes and
    M_B the mistakes of the learner that is B at that trial, both since the last restart.
    From tau >= d * 2^rho (rho restarts so far) the restart condition M_B < M_V is checked
    after every trial; a restart discards the slots and resets tau, s, M_B and M_V, never
    the learners. Where the paper is silent (the window's m, the estimate, the counters, d,
    the order within a trial) the readings taken are in docs/readings.rst, ``v-combine``.

    What is served can be made robust where labels come late (docs/delayed_labels.rst);
    both options change only the predictions served, never what V-Combine or its learners
    learn and count. ``signs="nonnegative"`` serves the rule in force (B alone or the vote)
    with every voter's negative sub-expert weights set to 0, so a sub-expert only adds to
    the classes it votes for: a broken one can no longer win because the weights of those
    that agree on the right class have mixed signs and nearly cancel. ``ties="plain-sum"``
    breaks a tie of the rule in force by the unweighted sum of the sub-experts' votes, then
    the smallest class: before the first update, when every score is 0, the rule serves
    that plain sum instead of the first class. Both need learners over sub-experts.

    ``select="weighted-majority"`` chooses B instead as the learner with the largest weight
    of a Weighted Majority over the learners (Littlestone & Warmuth 1994), ties to list
    order: weights start at 1 and the learners that predicted wrongly are multiplied by
    ``beta``, on every trial (``wm_update="every_trial"``) or only on trials where the
    weighted vote of the learners' predicted labels was wrong (``"on_mistake"``). With
    every-trial updates and beta > 0 the weights are beta^mistakes, so B is again the
    learner with the fewest mistakes; the on-mistake variant gives a different choice. WM
    only selects B, it never predicts.

    A trial costs O((v + h) m) plus, at window trials with a new hypothesis, O(r m) for its
    estimate and O(n) for a snapshot. ``updated`` is True when a learner updated, a slot
    changed, or the choice of B or between B and the vote changed: whenever the frozen
    predictor (:meth:`snapshot`) may have changed, so ``version_`` moves with it. A trial
    that a learner refuses (an overflow) is undone whole: no learner keeps it.

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
    signs
        ``"signed"`` (the paper) or ``"nonnegative"``.
    ties
        ``"first"`` (the paper) or ``"plain-sum"``.
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
    _parameter_constraints = {
        "learners": SpecList(),
        "h": Integer(2, 100_000),
        "r": Integer(0, 100_000),
        "window": Integer(0, 2**40),
        "restart_wait": Integer(1, 2**40),
        "accuracy": Options(("buffer+online", "buffer")),
        "vote_normalize": Options(("none", "l1", "maxabs")),
        "signs": Options(("signed", "nonnegative")),
        "ties": Options(("first", "plain-sum")),
        "select": Options(("fewest-mistakes", "weighted-majority")),
        "beta": Real(0.0, 1.0, high_open=True),
        "wm_update": Options(("every_trial", "on_mistake")),
        "restarts": Bool(),
        "labels": Labels(),
        "n_features": Integer(1, MAX_SIZE, optional=True),
        "n_experts": Integer(1, MAX_SIZE, optional=True),
    }
    _state_arrays = vs.STATE_ARRAYS
    #: Run trials through :mod:`models.voting.compiled` when the members allow it; False keeps
    #: the composed reference path (the two agree bit for bit).
    _compiled: ClassVar[bool] = True
    #: What :meth:`_served_voters` keeps: B's served hypothesis with B and its version, and
    #: each held slot's served hypothesis by the slot hypothesis's id.
    _served_current: tuple[Learner, int, Hypothesis] | None
    _served_slots: dict[int, tuple[Hypothesis, Hypothesis]]

    slot_table_ = vs.Packed(lambda vc: vs.pack_slot_table(vc.slots_))
    slot_reals_ = vs.Packed(lambda vc: vs.pack_slot_reals(vc.slots_))
    slot_weights_ = vs.Packed(lambda vc: vs.pack_slot_weights(vc.slots_, vc.input_size))
    buffer_labels_ = vs.Packed(lambda vc: vs.pack_buffer_labels(vc.buffer_))
    buffer_offsets_ = vs.Packed(lambda vc: vs.pack_buffer_offsets(vc.buffer_))
    buffer_index_ = vs.Packed(lambda vc: vs.pack_buffer_index(vc.buffer_, vc.input_kind))
    buffer_values_ = vs.Packed(lambda vc: vs.pack_buffer_values(vc.buffer_, vc.input_kind))

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
        signs: str = "signed",
        ties: str = "first",
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
        self.signs = signs
        self.ties = ties
        self.labels = labels  # type: ignore[assignment]
        self.n_features = n_features
        self.n_experts = n_experts
        self._initialise()

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def input_kind_for(cls, params: Mapping[str, Any]) -> str:
        learners = params.get("learners")
        expected = SpecList().check(learners)
        if expected:
            raise InvalidParameter("learners", learners, expected)
        kinds = [input_kind_of(item, f"learners[{i}]") for i, item in enumerate(learners)]  # type: ignore[arg-type]
        if len(set(kinds)) > 1:
            raise InvalidParameter(
                "learners", kinds, "learners that all take attributes or all take sub-experts"
            )
        return kinds[0]

    @property
    def input_size(self) -> int:
        return int((self.n_features if self.input_kind == "attributes" else self.n_experts) or 0)

    def _check_params(self) -> None:
        if self.h % 2:
            raise InvalidParameter("h", self.h, "an even integer >= 2")
        members = self.members()
        kind = self.input_kind_for({"learners": members})
        size = check_size(self, kind, f"{kind} learners")
        self.input_kind = kind
        for name, paper in (("signs", "signed"), ("ties", "first")):
            if kind != "experts" and getattr(self, name) != paper:
                raise InvalidParameter(name, getattr(self, name), f"{paper!r} over attributes")
        specs, built, checks, codes = [], [], [], []
        for i, item in enumerate(members):
            inner = build_inner(item, labels=self.labels, size=size, path=f"learners[{i}]")
            probe = inner.snapshot()
            if type(probe) not in HYPOTHESIS_CLASSES:  # slots must be able to export it
                raise InvalidParameter(
                    f"learners[{i}]", inner_spec(inner), "a learner with a linear hypothesis"
                )
            specs.append(inner_spec(inner))
            built.append(inner)
            checks.append(probe.check)
            codes.append(hypothesis_fields(probe)[0])
        self._checks, self._codes = checks, codes
        ranges = [inner.value_range or (-np.inf, np.inf) for inner in built]
        low, high = max(lo for lo, _ in ranges), min(hi for _, hi in ranges)
        self.value_range = None if (low, high) == (-np.inf, np.inf) else (low, high)
        weighted = self.select == "weighted-majority"
        self._members = Members(built, specs, weighted, self.beta, self.wm_update)
        self._online = self.accuracy == "buffer+online"
        self._as_paper = (self.signs, self.ties) == ("signed", "first")

    def members(self) -> Sequence[Mapping[str, Any] | Learner]:
        """The specs (or learner objects) of the members to build."""
        return self.learners

    def spec_params(self) -> dict[str, Any]:
        return {**self.get_params(), "learners": self.learners_}

    def _reset_state(self) -> None:
        self._members.reset()
        self._schedule = Schedule(
            self.h, self.window, self.restart_wait, self.restarts, self._online
        )
        self.buffer_: deque[tuple[Any, int]] = deque(maxlen=self.r)
        self._loaded: dict[str, np.ndarray] = {}
        self._fast: CompiledMembers | None = None  # built at the next trial
        self._fast_tried = False
        self._whole = False
        self._forget_served()

    # -- what V-Combine holds ---------------------------------------------------------------

    @property
    def learners_(self) -> list[Learner]:
        return self._members.learners

    @property
    def followers(self) -> dict[int, int]:
        return self._members.followers

    @property
    def weighted_vote(self) -> bool:
        return self._members.weighted_vote

    @property
    def learner_mistakes_(self) -> np.ndarray:
        return self._members.mistakes

    @learner_mistakes_.setter
    def learner_mistakes_(self, value: np.ndarray) -> None:
        self._members.mistakes = value

    @property
    def recent_mistakes_(self) -> np.ndarray:
        return self._members.recent

    @recent_mistakes_.setter
    def recent_mistakes_(self, value: np.ndarray) -> None:
        self._members.recent = value

    @property
    def wm_weights_(self) -> np.ndarray:
        return self._members.weights

    @wm_weights_.setter
    def wm_weights_(self, value: np.ndarray) -> None:
        self._members.weights = value

    @property
    def scalars_(self) -> np.ndarray:
        return self._schedule.scalars

    @scalars_.setter
    def scalars_(self, value: np.ndarray) -> None:
        self._schedule.scalars = value

    @property
    def slots_(self) -> list[Slot]:
        return self._schedule.slots

    @property
    def tau_(self) -> int:
        """Trials since the last (re)start."""
        return self._schedule.tau

    @property
    def spacing_(self) -> int:
        return self._schedule.spacing

    @property
    def restarts_(self) -> int:
        return self._schedule.restart_count

    @property
    def vote_mistakes_(self) -> int:
        """M_V: the vote's mistakes since the last restart."""
        return self._schedule.vote_mistakes

    @property
    def best_(self) -> int:
        """The index of the learner B whose current hypothesis votes and may predict."""
        return self._members.best()

    @property
    def best_mistakes_(self) -> int:
        """M_B: B's mistakes since the last restart."""
        return int(self._members.recent[self.best_])

    @property
    def uses_best_(self) -> bool:
        """Whether the next prediction is B's (M_B < M_V) rather than the vote's."""
        return self.best_mistakes_ < self.vote_mistakes_

    @property
    def schedule(self) -> tuple[SlotView, ...]:
        """The current targets in order, their windows and the hypotheses they hold."""
        return self._schedule.views()

    @property
    def slot_hypotheses(self) -> tuple[Hypothesis, ...]:
        return self._schedule.hypotheses()

    # -- prediction -------------------------------------------------------------------------

    def _vote_of(self, x: Any, current: np.ndarray) -> np.ndarray:
        scores = [h.scores(x) for h in self._schedule.hypotheses()]
        scores.append(current)
        return combine_votes(scores, self.vote_normalize, self.n_classes)

    def vote_scores(self, x: Any) -> np.ndarray:
        """The vote V (slots plus B's current hypothesis), whichever rule predicts."""
        x = self.coerce(x)
        return self._vote_of(x, self.learners_[self.best_].scores(x))

    def _scores(self, x: Any) -> np.ndarray:
        if not self._as_paper:
            return self._served_scores(x)
        current = self.learners_[self.best_].scores(x)
        return current if self.uses_best_ else self._vote_of(x, current)

    def _predict(self, x: Any) -> int:
        if not self._as_paper:
            scores = self._served_scores(x)
            return int(
                argmax_first(scores) if self.ties == "first" else first_by_plain_sum(scores, x)
            )
        if self.uses_best_:
            return self._class[self.learners_[self.best_].predict(x)]
        return int(argmax_first(self._scores(x)))

    def snapshot(self) -> Hypothesis:
        """The frozen rule in force: B's hypothesis if M_B < M_V, else the vote (as served:
        with ``signs`` and ``ties``)."""
        if not self._as_paper:
            normalize = "none" if self.uses_best_ else self.vote_normalize
            return VotingHypothesis(
                self._served_voters(), normalize, self.labels, self._check, self.ties
            )
        current = self.learners_[self.best_].snapshot()
        if self.uses_best_:
            return current
        return VotingHypothesis(
            [*self.slot_hypotheses, current], self.vote_normalize, self.labels, self._check
        )

    # -- what is served with ``signs`` and ``ties`` (docs/delayed_labels.rst) ----------------

    def _served_voters(self) -> list[Hypothesis]:
        """The voters of the rule in force as served: with ``signs="nonnegative"`` each
        without its negative weights (kept until the slot or B's version changes)."""
        best = self.learners_[self.best_]
        kept = self._served_current
        if kept is None or kept[0] is not best or kept[1] != best.version_:
            current = best.snapshot()
            kept = (best, best.version_, self._signed(current))
            self._served_current = kept
        if self.uses_best_:
            return [kept[2]]
        held = self._schedule.hypotheses()
        cache = self._served_slots
        if len(cache) > 2 * self.h:  # drop the slots no longer held
            cache = self._served_slots = {id(h): cache[id(h)] for h in held if id(h) in cache}
        voters = []
        for h in held:
            hit = cache.get(id(h))
            if hit is None or hit[0] is not h:
                hit = cache[id(h)] = (h, self._signed(h))
            voters.append(hit[1])
        return [*voters, kept[2]]

    def _signed(self, h: Hypothesis) -> Hypothesis:
        return nonnegative(h) if self.signs == "nonnegative" else h

    def _served_scores(self, x: Any) -> np.ndarray:
        scores = [h.scores(x) for h in self._served_voters()]
        if self.uses_best_:
            return scores[0]
        return combine_votes(scores, self.vote_normalize, self.n_classes)

    def _forget_served(self) -> None:
        """Drop the served voters kept (their learners were replaced, reset or undone)."""
        self._served_current = None
        self._served_slots = {}

    def weights(self) -> np.ndarray:
        """The effective weights of :meth:`snapshot` (see :class:`VotingHypothesis`)."""
        return np.array(effective_weights(self.snapshot()))

    # -- the trial (Mesterharm & Hsu, §V.B) ------------------------------------------------

    def _learn(self, x: Any, c: int) -> tuple[int, bool]:
        members, fast = self._members, self._compiled_members(x)
        b = members.best()
        current = self.learners_[b]
        key = (b, current.version_)
        use_best = self.uses_best_
        served = None if self._as_paper else self._predict(x)
        journal = self._journal
        if fast is not None:  # steps 1-3 in one compiled call
            fast.pack_slots(self)
            if journal is not None:  # the compiled loop runs the refusing members first
                journal += fast.checkpoints(self, x, self._whole)
            failed, voted, best_predicted = fast.trial(x, c, b)
            predicted = best_predicted if use_best else voted
            wrong, changed = fast.settle(self, c, failed, predicted)
            picks = None
        else:
            # 1. the vote and the prediction; 2-3. every member learns from its own
            voted = int(argmax_first(self._vote_of(x, current.scores(x))))
            predicted = current._predict(x) if use_best else voted
            picks = members.picks(x)
            wrong, changed = members.learn(self, x, c, self.labels[c], journal, self._whole)
        if served is not None:
            predicted = served
        # 4. the counts; 5-7. the windows, doubling and restarts
        schedule = self._schedule
        schedule.credit(key, not wrong[b])
        members.count(wrong, picks, c, self.n_classes)
        self.buffer_.append((x, c))
        schedule.close(voted != c)
        changed |= self._advance()
        return predicted, changed or (self.best_, self.uses_best_) != (b, use_best)

    def _advance(self) -> bool:
        """Steps 5-7 after tau += 1: windows, doubling, restart. True if a slot changed."""
        b = self._members.best()
        best = self.learners_[b]
        schedule = self._schedule
        changed = schedule.advance(
            (b, best.version_), lambda: self._record(b), lambda: self._taken(best)
        )
        if schedule.restart_due(int(self._members.recent[b])):
            changed |= schedule.restart()
            self._members.recent[:] = 0
        return changed

    @staticmethod
    def _taken(learner: Learner) -> tuple[Hypothesis, float]:
        """A snapshot of ``learner`` for a slot, and the weight an untouched coordinate
        has in it (what the slot's new coordinates take if the input grows)."""
        return learner.snapshot(), untouched_weight(learner)

    def _record(self, g: int) -> tuple[int, int]:
        """(correct, tried) of learner g's current hypothesis on the r-buffer."""
        if self._fast is not None:
            return self._fast.record(g), len(self.buffer_)
        return self._members.record(g, self.buffer_)

    def _compiled_members(self, x: Any) -> CompiledMembers | None:
        """The compiled view of the members (:mod:`models.voting.compiled`), if they allow one."""
        if not self._compiled:  # (a view taken before would miss the trials from here)
            self._fast, self._fast_tried = None, False
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

    # -- a larger input, more labels ---------------------------------------------------------

    def _can_grow(self) -> None:
        self._members.can_grow()

    def _take(self, old: Learner, at: np.ndarray) -> None:
        """The members grow as their kinds do and keep their counts; the schedule stands;
        a held hypothesis gives its new coordinates the weight an untouched coordinate had
        in it (:mod:`models.voting.grow`); the buffered instances are renumbered. A new
        label is one no member and no held hypothesis has scored yet."""
        assert isinstance(old, VCombine)
        self._members.take(old._members, at)
        self._schedule.scalars[...] = old.scalars_
        self._schedule.slots = [self._grown_slot(slot, at) for slot in old.slots_]
        moved: list[tuple[Any, int]]
        if self.input_kind == "attributes":
            moved = [(Attributes(at[x.indices], x.values), c) for x, c in old.buffer_]
        else:
            moved = [(Experts(at[x.expert], x.cls, x.value), c) for x, c in old.buffer_]
        self.buffer_ = deque(moved, maxlen=self.r)

    def _grown_slot(self, slot: Slot, at: np.ndarray) -> Slot:
        out = copy.copy(slot)
        if slot.hypothesis is None:
            return out
        g = slot.key[0]
        member = self.learners_[g]
        now = member.snapshot() if isinstance(slot.hypothesis, LinearHypothesis) else None
        out.hypothesis = grown_hypothesis(
            slot.hypothesis, slot.untouched, self.input_size, at, self.labels, self._checks[g],
            threshold=now.threshold if isinstance(now, LinearHypothesis) else None,
            by_sum=normalised_by_sum(member),
        )  # fmt: skip
        return out

    # -- refusals ---------------------------------------------------------------------------

    def can_refuse(self) -> bool:
        return any(inner.can_refuse() for inner in self.learners_)

    def _save(self, x: Any, whole: bool) -> Any:
        """The stores the compiled path may widen and, for a whole trial, V-Combine's own
        state (the slots are copied, their hypotheses are immutable)."""
        self._whole = whole
        stores = [
            (m, m.items_a_, m.items_b_, m.items_v_)
            for m in self.learners_
            if isinstance(m, Recycling) and self._compiled
        ]
        if not whole:
            return stores, None
        arrays = (self.learner_mistakes_, self.recent_mistakes_, self.wm_weights_, self.scalars_)
        slots = [copy.copy(slot) for slot in self.slots_]
        return stores, ([a.copy() for a in arrays], slots, deque(self.buffer_, maxlen=self.r))

    def _restore(self, saved: Any) -> None:
        stores, own = saved
        for m, a, b, v in stores:
            m.items_a_, m.items_b_, m.items_v_ = a, b, v
        if own is not None:
            arrays, self._schedule.slots, self.buffer_ = own
            live = (self.learner_mistakes_, self.recent_mistakes_, self.wm_weights_, self.scalars_)
            for target, value in zip(live, arrays, strict=True):
                target[...] = value
        self._fast, self._fast_tried = None, False  # the members' arrays are theirs again
        self._forget_served()

    # -- state ------------------------------------------------------------------------------

    def _array_shapes(self) -> dict[str, tuple[int, ...]]:
        return vs.array_shapes(len(self.learners_), self.h, self.input_size, self.input_kind)

    def _check_state(self) -> None:
        vs.check_counters(
            self.scalars_, self.learner_mistakes_, self.recent_mistakes_, self.wm_weights_, self.h
        )

    def _export_extra(self) -> dict[str, Any]:
        return {f"learner:{i}": inner.export_state() for i, inner in enumerate(self.learners_)}

    def _import_extra(self, children: Mapping[str, Any]) -> None:
        if all(name.startswith("learner.") for name in children):  # the earlier spelling
            children = {name.replace(".", ":", 1): doc for name, doc in children.items()}
        fresh = [inner.clone() for inner in self.learners_]
        import_children(fresh, children, "learner", self.kind)
        loaded, self._loaded = self._loaded, {}
        slots = vs.rebuild_slots(
            loaded, fresh, self.scalars_, self.h, self.window, self.r,
            self._codes, self._checks, self.labels,
        )  # fmt: skip
        buffer = vs.rebuild_buffer(loaded, self.r, self.n_classes, self.input_kind, self._check)
        self._members.replace(fresh)
        self._schedule.slots, self.buffer_ = slots, buffer
        self._fast, self._fast_tried = None, False
        self._forget_served()
