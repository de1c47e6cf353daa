"""V-Combine's schedule: the pure target and window arithmetic and the slot records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from models.core.hypothesis import Hypothesis
from models.voting.hypothesis import hypothesis_fields

__all__ = [
    "Slot",
    "SlotView",
    "creation_spacing",
    "higher_record",
    "live_window",
    "restart_wait",
    "targets",
    "window",
]


# -- the schedule arithmetic (§3.2 (1), (2), (6)) -------------------------------------------


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

    A target j * s with j <= h/2 was already a target at spacing s/2 (Ambiguity A17).
    """
    while spacing > 1 and target // spacing <= h // 2:
        spacing //= 2
    return spacing


def live_window(target: int, spacing: int, h: int, w: int) -> tuple[int, int]:
    """The window a live schedule gives ``target`` (A17: m from the creation spacing).

    >>> live_window(256, 64, 4, 100), live_window(256, 128, 4, 100)
    ((240, 272), (240, 272))
    """
    return window(target, creation_spacing(target, spacing, h), w)


def restart_wait(d: int, restarts: int) -> int:
    """Trials after a (re)start before restarts are checked: d, 2d, 4d, ... (A4)."""
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
