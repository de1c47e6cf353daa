"""V-Combine's schedule: the target and window arithmetic, the slots, and the steps that
move them after a trial (Mesterharm & Hsu, §V.B)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from models.core.hypothesis import Hypothesis
from models.voting.hypothesis import hypothesis_fields

__all__ = [
    "Schedule",
    "Slot",
    "SlotView",
    "creation_spacing",
    "higher_record",
    "live_window",
    "restart_wait",
    "targets",
    "window",
]


# -- the schedule arithmetic (Mesterharm & Hsu, §V.B) ---------------------------------------


def targets(spacing: int, h: int) -> tuple[int, ...]:
    """The target trials j * s, j = 1..h, while the spacing is ``spacing``."""
    return tuple(j * spacing for j in range(1, h + 1))


def window(target: int, spacing: int, w: int) -> tuple[int, int]:
    """S4's search window: m = min(W, floor(s/2)), [t - floor(m/2), t - floor(m/2) + m].

    >>> window(256, 128, 100)
    (224, 288)
    """
    m = min(w, spacing // 2)
    start = target - m // 2
    return start, start + m


def creation_spacing(target: int, spacing: int, h: int) -> int:
    """The spacing in force when ``target``, one of ``targets(spacing, h)``, was created.

    A target j * s with j <= h/2 was already a target at spacing s/2 (a reading of the
    paper's example: docs/readings.rst, ``v-combine``).
    """
    while spacing > 1 and target // spacing <= h // 2:
        spacing //= 2
    return spacing


def live_window(target: int, spacing: int, h: int, w: int) -> tuple[int, int]:
    """The window a live schedule gives ``target`` (m from the creation spacing).

    >>> live_window(256, 64, 4, 100), live_window(256, 128, 4, 100)
    ((240, 272), (240, 272))
    """
    return window(target, creation_spacing(target, spacing, h), w)


def restart_wait(d: int, restarts: int) -> int:
    """Trials after a (re)start before restarts are checked: d, 2d, 4d, ... (the paper
    does not give d)."""
    return d * 2**restarts


# -- the slots ----------------------------------------------------------------------------


@dataclass
class Slot:
    """One target and the hypothesis its window has chosen so far."""

    target: int
    start: int
    end: int
    hypothesis: Hypothesis | None = None
    trial: int = 0  # tau at which the held hypothesis was chosen
    key: tuple[int, int] = (0, 0)  # (learner, version) of the held hypothesis
    seen: tuple[int, int] = (0, 0)  # the last hypothesis considered
    c_buf: int = 0  # correct / tried on the r-buffer at birth
    n_buf: int = 0
    c_on: int = 0  # correct / tried on-line while it was the current hypothesis
    n_on: int = 0
    untouched: float = 0.0  # an untouched coordinate's weight in the held hypothesis

    def row(self) -> list[int]:
        """The slot's row of ``slot_table_``."""
        return [
            *(self.target, self.start, self.end, self.trial, *self.key, *self.seen),
            *(
                self.c_buf,
                self.n_buf,
                self.c_on,
                self.n_on,
                *hypothesis_fields(self.hypothesis)[:2],
            ),
        ]

    def estimate(self, online: bool) -> tuple[int, int]:
        if online:
            return self.c_buf + self.c_on, self.n_buf + self.n_on
        return self.c_buf, self.n_buf


def higher_record(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether estimate a = correct/tried is strictly above b; an empty record is 0."""
    (ca, na), (cb, nb) = a, b
    if na == 0:
        return False
    return ca > 0 if nb == 0 else ca * nb > cb * na


class SlotView(NamedTuple):
    """A read-only view of one slot: its target, window and held hypothesis."""

    target: int
    start: int
    end: int
    held: bool
    trial: int  # tau at which the held hypothesis was chosen (0: none yet)
    learner: int  # the learner it came from (-1: none)
    version: int  # that learner's version_ then (-1: none)


class Schedule:
    """The h slots and the counters that move them.

    ``scalars`` (V-Combine's ``scalars_``) is [tau, spacing, restarts, M_V]: trials since
    the last (re)start, the spacing s, the restarts so far and the vote's mistakes since the
    last restart. ``wait`` is d, the first wait before restarts are checked.
    """

    def __init__(self, h: int, window: int, wait: int, restarts: bool, online: bool) -> None:
        self.h, self.window, self.wait = h, window, wait
        self.restarts, self.online = restarts, online
        self.scalars = np.array([0, 1, 0, 0], dtype=np.int64)
        self.slots = self.initial()

    def initial(self) -> list[Slot]:
        return [Slot(t, *window(t, 1, self.window)) for t in targets(1, self.h)]

    @property
    def tau(self) -> int:
        return int(self.scalars[0])

    @property
    def spacing(self) -> int:
        return int(self.scalars[1])

    @property
    def restart_count(self) -> int:
        return int(self.scalars[2])

    @property
    def vote_mistakes(self) -> int:
        return int(self.scalars[3])

    def views(self) -> tuple[SlotView, ...]:
        """The current targets in order, their windows and the hypotheses they hold."""
        return tuple(
            SlotView(s.target, s.start, s.end, True, s.trial, *s.key)
            if s.hypothesis is not None
            else SlotView(s.target, s.start, s.end, False, 0, -1, -1)
            for s in self.slots
        )

    def hypotheses(self) -> tuple[Hypothesis, ...]:
        return tuple(s.hypothesis for s in self.slots if s.hypothesis is not None)

    def credit(self, key: tuple[int, int], correct: bool) -> None:
        """With the on-line estimate, credit the slots whose held hypothesis predicted this
        trial as B's current one, within their window."""
        if not self.online:
            return
        tau = self.tau
        for s in self.slots:
            if s.key == key and s.start <= tau < s.end:
                s.c_on += int(correct)
                s.n_on += 1

    def close(self, vote_wrong: bool) -> None:
        """Count the trial: the vote's mistake, and tau += 1."""
        self.scalars[3] += vote_wrong
        self.scalars[0] += 1

    def advance(
        self,
        key: tuple[int, int],
        record: Callable[[], tuple[int, int]],
        snapshot: Callable[[], tuple[Hypothesis, float]],
    ) -> bool:
        """Steps 5-6 after tau += 1: the windows consider B's hypothesis ``key`` (its
        ``record`` on the r-buffer, its ``snapshot`` with the weight an untouched
        coordinate has in it), then the spacing doubles when tau reaches h * s. True if a
        slot changed."""
        tau, s, h = self.tau, self.spacing, self.h
        changed = False
        for slot in self.slots:
            if slot.start == tau:
                self._hold(slot, key, record(), snapshot())
                changed = True
            elif slot.start < tau <= slot.end and slot.seen != key:
                slot.seen = key
                estimate = record()
                if higher_record(estimate, slot.estimate(self.online)):
                    self._hold(slot, key, estimate, snapshot())
                    changed = True
        if tau == h * s:  # keep the even multiples of the old spacing
            kept = [t for t in self.slots if (t.target // s) % 2 == 0]
            changed |= any(t.hypothesis is not None for t in self.slots if (t.target // s) % 2)
            s *= 2
            self.scalars[1] = s
            new = targets(s, h)[h // 2 :]
            self.slots = kept + [Slot(t, *window(t, s, self.window)) for t in new]
        return changed

    def _hold(
        self,
        slot: Slot,
        key: tuple[int, int],
        record: tuple[int, int],
        taken: tuple[Hypothesis, float],
    ) -> None:
        slot.hypothesis, slot.untouched = taken
        slot.trial, slot.key, slot.seen = self.tau, key, key
        slot.c_buf, slot.n_buf = record
        slot.c_on = slot.n_on = 0

    def restart_due(self, best_recent: int) -> bool:
        """Step 7: from tau >= d * 2^restarts, restart when M_B < M_V."""
        return (
            self.restarts
            and self.tau >= restart_wait(self.wait, self.restart_count)
            and best_recent < self.vote_mistakes
        )

    def restart(self) -> bool:
        """Discard the slots and reset tau, s and M_V; True if a slot held a hypothesis."""
        changed = any(t.hypothesis is not None for t in self.slots)
        self.slots = self.initial()
        self.scalars[:] = [0, 1, self.restart_count + 1, 0]
        return changed
