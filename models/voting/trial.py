"""V-Combine's trial and prediction (ALGORITHMS.md §3.2): the vote, the choice between B and
the vote, the windows, doubling and restarts.

:class:`VotingTrial` is the part of :class:`models.voting.vcombine.VCombine` that runs trials over
the members it holds; the members' own part of a trial runs compiled when they allow it
(:mod:`models.voting.compiled`).

Refusals: roll back. Members learn before anything of V-Combine's own moves, the ones
that can refuse first, each leaving an undo token; so a refusal undoes only those, and
the others have not learned yet. A checkpoint for a wrapper that must undo a whole trial
(``whole``) journals every member and keeps V-Combine's own state too
(:mod:`models.voting.state`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from models.core.hypothesis import Hypothesis
from models.core.learner import Learner
from models.kernels.common import argmax_first
from models.voting.compiled import CompiledMembers
from models.voting.hypothesis import VotingHypothesis, combine_votes, effective_weights
from models.voting.schedule import Slot, SlotView, higher_record, restart_wait, targets, window
from models.wrappers.averaging import Averaging
from models.wrappers.recycling import Recycling

__all__ = ["VotingTrial", "find_followers", "link_followers"]


# -- nested learners that follow another member --------------------------------------------


def find_followers(specs: Sequence[Mapping[str, Any]]) -> dict[int, int]:
    """Averaging members whose inner learner is another member: {averaged: that member}.

    An AR-B beside its R-B would otherwise train a second, identical R-B; instead the
    averaged member follows the other member's trials.
    """
    out = {}
    for j, spec in enumerate(specs):
        if spec.get("kind") == "averaging" and spec.get("learner") in specs:
            out[j] = list(specs).index(spec["learner"])
    return out


def link_followers(learners: list[Learner], followers: Mapping[int, int]) -> None:
    for j, i in followers.items():
        averaged = learners[j]
        assert isinstance(averaged, Averaging)
        averaged.learner_ = learners[i]


class VotingTrial(Learner):
    """V-Combine's trial over its members ``learners_`` (see :class:`VCombine`)."""

    #: Run trials through :mod:`models.voting.compiled` when the members allow it; False keeps
    #: the composed reference path (the two agree bit for bit).
    _compiled: ClassVar[bool] = True

    h: int
    r: int
    window: int
    restart_wait: int
    restarts: bool
    vote_normalize: str
    wm_update: str
    beta: float
    learners_: list[Learner]
    slots_: list[Slot]
    buffer_: deque[tuple[Any, int]]
    scalars_: np.ndarray
    learner_mistakes_: np.ndarray
    recent_mistakes_: np.ndarray
    wm_weights_: np.ndarray
    followers: dict[int, int]
    _online: bool
    weighted_vote: bool
    _fast: CompiledMembers | None
    _fast_tried: bool
    _whole: bool
    #: The members that are not followers, those that can refuse an update first.
    _refusing_first: list[int]

    def _initial_slots(self) -> list[Slot]:
        return [Slot(t, *window(t, 1, self.window)) for t in targets(1, self.h)]

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
        if self.weighted_vote:
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
        return combine_votes(scores, self.vote_normalize, self.n_classes)

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
        return np.array(effective_weights(self.snapshot()))

    # -- the trial ---------------------------------------------------------------------------

    def _learn(self, x: Any, c: int) -> tuple[int, bool]:
        fast = self._compiled_members(x)
        b = self.best_
        current = self.learners_[b]
        key = (b, current.version_)
        use_best = self.uses_best_
        journal = self._journal
        if fast is not None:
            fast.pack_slots(self)
            if journal is not None:  # the compiled loop runs the refusing members first
                journal += fast.checkpoints(self, x, self._whole)
            failed, voted, best_predicted = fast.trial(x, c, b)
            predicted = best_predicted if use_best else voted
            wrong, changed = fast.settle(self, c, failed, predicted)
            changed |= self._finish(x, c, key, voted, wrong, None)
            return predicted, changed or (self.best_, self.uses_best_) != (b, use_best)
        voted = int(argmax_first(self._vote_of(x, current.scores(x))))
        predicted = current._predict(x) if use_best else voted
        picks = (
            [inner._predict(x) for inner in self.learners_]
            if self.weighted_vote and self.wm_update == "on_mistake"
            else None
        )
        y = self.labels[c]
        follow = self.followers
        before = {j: self.learners_[j]._predict(x) for j in follow}  # before the leaders learn
        done = {}
        for i in self._refusing_first:
            inner = self.learners_[i]
            if journal is None or not (self._whole or inner._refuses):
                done[i] = inner.learn(x, y)
            else:
                done[i] = self._member_learns(inner, x, y)
        for j, i in follow.items():
            averaged = self.learners_[j]
            assert isinstance(averaged, Averaging)
            if journal is not None and self._whole:
                journal.append((averaged, averaged.checkpoint(x)))
            done[j] = averaged.follow(x, c, before[j], done[i].updated)
        outcomes = [done[i] for i in range(len(self.learners_))]
        wrong = np.array([o.mistake for o in outcomes], dtype=bool)
        changed = any(o.updated for o in outcomes)
        changed |= self._finish(x, c, key, voted, wrong, picks)
        return predicted, changed or (self.best_, self.uses_best_) != (b, use_best)

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
        if self.weighted_vote:
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

    def _hold(self, slot: Slot, key: tuple[int, int], record: tuple[int, int]) -> None:
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
                if higher_record(record, slot.estimate(self._online)):
                    self._hold(slot, key, record)
                    changed = True
        if tau == h * s:  # keep the even multiples of the old spacing
            kept = [t for t in self.slots_ if (t.target // s) % 2 == 0]
            changed |= any(t.hypothesis is not None for t in self.slots_ if (t.target // s) % 2)
            s *= 2
            self.scalars_[1] = s
            new = targets(s, h)[h // 2 :]
            self.slots_ = kept + [Slot(t, *window(t, s, self.window)) for t in new]
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
