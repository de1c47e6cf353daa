"""V-Combine's v members: how one trial teaches them, their mistake counts and, for
``select="weighted-majority"``, their weights (Mesterharm & Hsu, §V.B; Littlestone &
Warmuth 1994 for the selector).

Refusals: members learn before anything of V-Combine's own moves, the ones that can
refuse first, each leaving an undo token in the open journal; so a refusal undoes only
those, and the others have not learned yet. A whole-trial checkpoint journals every member.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from models.core.hypothesis import Label
from models.core.learner import Learner
from models.kernels.common import argmax_first
from models.wrappers.averaging import Averaging

__all__ = ["Members", "find_followers", "link_followers"]


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
    """Make each follower average the member it follows."""
    for j, i in followers.items():
        averaged = learners[j]
        assert isinstance(averaged, Averaging)
        averaged.learner_ = learners[i]


class Members:
    """The learners V-Combine votes over, and what it counts of them.

    ``mistakes`` (all trials), ``recent`` (since the last restart) and ``weights`` (the
    Weighted Majority selector's) are V-Combine's ``learner_mistakes_``,
    ``recent_mistakes_`` and ``wm_weights_``.
    """

    def __init__(
        self,
        learners: list[Learner],
        specs: Sequence[Mapping[str, Any]],
        weighted_vote: bool,
        beta: float,
        wm_update: str,
    ) -> None:
        self.learners = learners
        self.weighted_vote = weighted_vote
        self.beta = beta
        self.wm_update = wm_update
        self.followers = find_followers(specs)
        link_followers(learners, self.followers)
        leaders = [i for i in range(len(learners)) if i not in self.followers]
        #: The members that are not followers, those that can refuse an update first.
        self.refusing_first = sorted(leaders, key=lambda i: not learners[i].can_refuse())
        self._zero()

    def reset(self) -> None:
        for inner in self.learners:
            inner.reset()
        self._zero()

    def _zero(self) -> None:
        v = len(self.learners)
        self.mistakes = np.zeros(v, dtype=np.int64)
        self.recent = np.zeros(v, dtype=np.int64)
        self.weights = np.ones(v)

    def replace(self, learners: list[Learner]) -> None:
        """Hold ``learners`` (imported copies of the members) from now on."""
        link_followers(learners, self.followers)
        self.learners = learners

    def take(self, old: Members, at: np.ndarray) -> None:
        """Take ``old``'s learned state into these fresh, larger members (see
        ``Learner.grown``): each member grows as its kind does, and the counts carry over.

        A follower's learner is its leader, which grows once: the follower takes its
        running sums beside a scratch copy of the leader, then follows the leader again.
        """
        for i in self.refusing_first:
            self.learners[i]._adopt(old.learners[i], at)
        for j in self.followers:
            averaged = self.learners[j]
            assert isinstance(averaged, Averaging)
            leader = averaged.learner_
            averaged.learner_ = leader.clone()
            averaged._adopt(old.learners[j], at)
            averaged.learner_ = leader
        self.mistakes[...] = old.mistakes
        self.recent[...] = old.recent
        self.weights[...] = old.weights

    def can_grow(self) -> None:
        """Raise ``CannotGrow`` when a member cannot take a larger input."""
        for inner in self.learners:
            inner._can_grow()

    def best(self) -> int:
        """The index of the learner B whose current hypothesis votes and may predict."""
        if self.weighted_vote:
            return int(np.argmax(self.weights))
        return int(np.argmin(self.mistakes))

    def picks(self, x: Any) -> list[int] | None:
        """The members' predictions, when the selector needs them to learn (on_mistake)."""
        if self.weighted_vote and self.wm_update == "on_mistake":
            return [inner._predict(x) for inner in self.learners]
        return None

    def learn(
        self, owner: Learner, x: Any, c: int, y: Label, journal: list[Any] | None, whole: bool
    ) -> tuple[np.ndarray, bool]:
        """Every member learns the trial; return which erred and whether any updated.

        ``owner`` journals the members' undo tokens while its checkpoint is open.
        """
        follow = self.followers
        before = {j: self.learners[j]._predict(x) for j in follow}  # before the leaders learn
        done = {}
        for i in self.refusing_first:
            inner = self.learners[i]
            if journal is None or not (whole or inner._refuses):
                done[i] = inner.learn(x, y)
            else:
                done[i] = owner._member_learns(inner, x, y)
        for j, i in follow.items():
            averaged = self.learners[j]
            assert isinstance(averaged, Averaging)
            if journal is not None and whole:
                journal.append((averaged, averaged.checkpoint(x)))
            done[j] = averaged.follow(x, c, before[j], done[i].updated)
        outcomes = [done[i] for i in range(len(self.learners))]
        wrong = np.array([o.mistake for o in outcomes], dtype=bool)
        return wrong, any(o.updated for o in outcomes)

    def count(self, wrong: np.ndarray, picks: list[int] | None, c: int, k: int) -> None:
        """Count the members' mistakes of a trial, and move the selector's weights."""
        self.mistakes += wrong
        self.recent += wrong
        if not self.weighted_vote:
            return
        u = self.weights
        if picks is not None:  # on_mistake: only when the weighted vote of the labels errs
            totals = np.bincount(picks, weights=u, minlength=k)
            if int(argmax_first(totals)) == c:
                return
        u[wrong] *= self.beta
        top = u.max()
        if 0.0 < top < 2.0**-512:  # an exact rescale by a power of two keeps every ratio
            u *= 2.0**512

    def record(self, g: int, buffer: deque[tuple[Any, int]]) -> tuple[int, int]:
        """(correct, tried) of learner g's current hypothesis on the r-buffer."""
        # Buffered instances were checked on arrival, and the learners share the labels.
        inner = self.learners[g]
        correct = sum(inner._predict(x) == c for x, c in buffer)
        return int(correct), len(buffer)
