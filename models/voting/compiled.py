"""V-Combine's trial in one compiled call when its members allow it (VR-Combine's do).

:class:`models.voting.vcombine.VCombine` composes its members through their public contract; that
path stays the reference. When every member is a recycled sub-expert learner (R-B) or an
averaged member that follows one (AR-B), the votes are raw sums and no selector needs the
members' labels, :class:`CompiledMembers` runs the members' part of a trial in one call of
:func:`models.kernels.voting.members_trial` over views of the members' own arrays, and
estimates hypotheses on the r-buffer in one call too. Everything the Python path does to
the members (their counters and versions included) is done here as well, so the state is
the same bit for bit; only the schedule's bookkeeping stays in Python, shared by both paths.

The members' stores and running sums move into one block per array name (each member keeps
a view of its part, so both paths see every change); the learners' weights stay where
they are, in typed lists. All this is set up once: V-Combine drops it whenever it resets
or imports a state, and sets it up afresh when a store must widen. Members must not be
reset or re-imported on their own while V-Combine holds them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol, cast

import numba
import numpy as np
from numba.typed import List

from models.core.hypothesis import LinearMaxHypothesis
from models.core.learner import Learner, UpdateRefused
from models.kernels.families import ALMA, BALANCED, PERCEPTRON, SUBEXPERT, base_family
from models.kernels.voting import buffer_record, members_trial
from models.wrappers.averaging import Averaging
from models.wrappers.recycling import Recycling
from models.wrappers.subexpert import SubExpert


class VotingView(Protocol):
    """What the compiled trial reads of the V-Combine it runs for."""

    buffer_: deque[tuple[Any, int]]
    r: int
    vote_normalize: str
    wm_update: str

    @property
    def learners_(self) -> list[Learner]: ...

    @property
    def followers(self) -> dict[int, int]: ...

    @property
    def weighted_vote(self) -> bool: ...

    @property
    def slots_(self) -> list[Any]: ...

    @property
    def input_kind(self) -> str: ...

    @property
    def input_size(self) -> int: ...

    @property
    def n_classes(self) -> int: ...


__all__ = ["CompiledMembers"]

_FAMILIES = (BALANCED, PERCEPTRON, ALMA)
_KernelState = tuple[int, np.ndarray, np.ndarray, np.ndarray]
_F1, _F2 = np.zeros(1), np.zeros((1, 1))  # the array types of the typed lists
#: The arrays of a recycled member's store and of an averaged member's running sums (and
#: coefficients), which the compiled trial keeps in one block per name across members.
_STORE = (
    "items_a_", "items_b_", "items_v_", "items_len_", "items_y_", "items_count_",
    "ring_", "internal_",
)  # fmt: skip
_SUMS = ("acc_", "seen_", "mark_", "totals_", "_coef")


def _typed(arrays: Sequence[np.ndarray], like: np.ndarray) -> Any:
    """A numba typed list of arrays typed like ``like`` (C-contiguous)."""
    out = List.empty_list(numba.typeof(like))
    for a in arrays:
        out.append(a)
    return out


def _contiguous(*arrays: np.ndarray) -> bool:
    return all(a.flags.c_contiguous for a in arrays)


def _blocks(members: Sequence[Any], names: Sequence[str], n: int = 0) -> list[np.ndarray]:
    """One array per name stacking every member's array, which the member then keeps as a
    view into the block, so both see every change. An averaged member's sums have one or
    two rows: their blocks have two, and the member's view takes its own rows."""
    out = []
    for name in names:
        arrays = [getattr(m, name) for m in members]
        if arrays:
            shape = tuple(np.max([a.shape for a in arrays], axis=0))
            dtype = arrays[0].dtype
        else:  # typed all the same, for the compiled code
            shape, dtype = _EMPTY[name](n), np.dtype(np.float64)
        block = np.zeros((len(arrays), *shape), dtype=dtype)
        for j, a in enumerate(arrays):
            where: tuple[Any, ...] = (j, *[slice(0, d) for d in a.shape])
            view = block[where]
            view[...] = a
            setattr(members[j], name, view)
        out.append(block)
    return out


_EMPTY = {  # the shape of an averaged member's array over n sub-experts, at most
    "acc_": lambda n: (2, n), "seen_": lambda n: (2, n), "mark_": lambda n: (n,),
    "totals_": lambda n: (4,), "_coef": lambda n: (2,),
}  # fmt: skip


class CompiledMembers:
    """Views of a V-Combine's members for the compiled trial; build with :meth:`of`."""

    def __init__(self, vc: VotingView, recycled: list[int], leaders: dict[int, int]) -> None:
        members = vc.learners_
        v = len(members)
        self.k = vc.n_classes
        role = np.zeros(v, dtype=np.int64)
        idx = np.zeros(v, dtype=np.int64)
        lead = np.zeros(v, dtype=np.int64)
        where = {g: i for i, g in enumerate(recycled)}
        store = [cast(Recycling, members[g]) for g in recycled]
        states = [cast(_KernelState, r.learner_.kernel_state()) for r in store]
        idx[recycled] = np.arange(len(recycled))
        averaged = sorted(leaders)
        for j, g in enumerate(averaged):
            role[g], idx[g], lead[g] = 1, j, where[leaders[g]]
        avg = [cast(Averaging, members[g]) for g in averaged]
        self.width = store[0].items_a_.shape[1] if store else 1
        rows = np.array([a.acc_.shape[0] for a in avg], dtype=np.int64)
        self.member = (
            role, idx, lead, np.array([s[0] for s in states], dtype=np.int64),
            _typed([s[1] for s in states], _F2), _typed([s[2] for s in states], _F1),
            _typed([s[3] for s in states], _F1),
            *_blocks(avg, _SUMS, vc.input_size), rows,
        )  # fmt: skip
        order = sorted(recycled, key=lambda g: not members[g].can_refuse())
        self.order = np.array(order, dtype=np.int64)  # the members that can refuse first
        us = np.array([r._u for r in store], dtype=np.int64)
        self.store = (self.order, us, *_blocks(store, _STORE))
        self.recycled, self.leaders = recycled, leaders
        members = vc.learners_
        self._recyclers = [(g, cast(Recycling, members[g])) for g in recycled]
        self._followers = [(g, i, cast(Averaging, members[g])) for g, i in leaders.items()]
        self.buffer = self._pack_buffer(vc, self.width)
        self.slots: tuple[Any, ...] = (np.zeros((0, vc.input_size)), np.zeros(0), 0)
        self.held: list[int] = []
        wide = max([self.buffer[0].shape[1], *(r.items_a_.shape[1] for r in store)])
        wf, wi = np.empty(self.k + wide), np.empty(max(wide, 1), dtype=np.int64)
        cur, vote = np.empty(self.k), np.empty(self.k)
        out = [np.zeros(v, dtype=np.int64) for _ in range(3)]
        self.work = (wf, wi, cur, vote, *out)
        self.dense = np.empty(vc.input_size)

    @classmethod
    def of(cls, vc: VotingView) -> CompiledMembers | None:
        """The compiled view of ``vc``'s members, or None when some member needs the
        reference path."""
        if vc.input_kind != "experts" or vc.vote_normalize != "none":
            return None
        if vc.weighted_vote and vc.wm_update == "on_mistake":  # needs every member's label
            return None
        recycled, leaders = [], {}
        for g, m in enumerate(vc.learners_):
            if g in vc.followers:
                leaders[g] = vc.followers[g]
                if not isinstance(m, Averaging) or m.learner_ is not vc.learners_[leaders[g]]:
                    return None
                continue
            if not (isinstance(m, Recycling) and type(m.learner_) is SubExpert):
                return None
            fam, W, S, P = m.learner_.kernel_state()
            if fam < SUBEXPERT or base_family(fam) not in _FAMILIES or not _contiguous(W, S, P):
                return None
            recycled.append(g)
        if any(leaders[g] not in recycled for g in leaders):
            return None
        shapes = {(m.size, m.items_a_.shape[1]) for m in vc.learners_ if isinstance(m, Recycling)}
        if len(shapes) > 1:  # stores of different sizes or widths: no common block
            return None
        return cls(vc, recycled, leaders)

    def _pack_buffer(self, vc: VotingView, width: int) -> tuple[np.ndarray, ...]:
        r = vc.r
        width = max([width, *(len(x) for x, _ in vc.buffer_)])
        ba = np.zeros((r, width), dtype=np.int64)
        bb = np.zeros((r, width), dtype=np.int64)
        bv = np.zeros((r, width))
        blen, by = np.zeros(r, dtype=np.int64), np.zeros(r, dtype=np.int64)
        for j, (x, c) in enumerate(vc.buffer_):
            m = len(x)
            ba[j, :m], bb[j, :m], bv[j, :m], blen[j], by[j] = x.expert, x.cls, x.value, m, c
        ring = np.array([0, len(vc.buffer_)], dtype=np.int64)
        return ba, bb, bv, blen, by, np.zeros(r, dtype=np.int64), ring

    def fits(self, m: int) -> bool:
        """Whether an instance of m non-zeros fits every store and the buffer."""
        return m <= self.width and m <= self.buffer[0].shape[1]

    def pack_slots(self, vc: VotingView) -> None:
        """Take the slot hypotheses' weights afresh if the held ones changed."""
        held = [s.hypothesis for s in vc.slots_ if s.hypothesis is not None]
        if [id(h) for h in held] == self.held:
            return
        linear = [cast(LinearMaxHypothesis, h) for h in held]
        assert all(isinstance(h, LinearMaxHypothesis) for h in linear)
        self.held = [id(h) for h in held]
        weights = np.zeros((len(held), vc.input_size))
        for j, h in enumerate(linear):
            weights[j] = h.weights
        scales = np.array([h.scale for h in linear], dtype=np.float64)
        self.slots = (weights, scales, len(held))

    def trial(self, x: Any, c: int, best: int) -> tuple[int, int, int]:
        """The members' part of one trial: (failed member or -1, vote's class, best's class)."""
        failed, voted, predicted = members_trial(
            x.expert, x.cls, x.value, c, best,
            *self.member, *self.store, *self.slots, *self.buffer, *self.work,
        )  # fmt: skip
        return int(failed), int(voted), int(predicted)

    def record(self, g: int) -> int:
        """How many buffered instances member g's current hypothesis predicts correctly."""
        work, dense = self.work[2], self.dense
        return int(buffer_record(g, *self.member, *self.buffer, work, dense))  # type: ignore[call-arg]

    def checkpoints(self, vc: VotingView, x: Any, whole: bool) -> list[tuple[Any, Any]]:
        """Undo tokens of the members the next trial may have to undo: those that can
        refuse (they learn first), or every member for a whole trial."""
        members = vc.learners_
        out = [
            (members[g], members[g].checkpoint(x))
            for g in self.recycled
            if whole or members[g]._refuses
        ]
        return out + [(members[g], members[g].checkpoint(x)) for g in self.leaders if whole]

    def settle(
        self, vc: VotingView, c: int, failed: int, predicted: int
    ) -> tuple[np.ndarray, bool]:
        """Count the trial in every member as ``learn`` and ``follow`` would; return which
        members made a mistake and whether any updated. On a refused update raise
        UpdateRefused at once (the members' checkpoints undo what the trial did)."""
        members = vc.learners_
        if failed >= 0:
            kind = cast(Recycling, members[failed]).learner_.kind
            raise UpdateRefused(f"{kind} refused an update that would overflow", predicted)
        preds, status, delta = (a.tolist() for a in self.work[4:])
        wrong = [p != c for p in preds]
        changed = False
        for g, r in self._recyclers:
            updated = status[g] == 1
            r.count_recycled(wrong[g], updated, delta[g])
            changed = changed or updated
        for g, i, a in self._followers:
            a.followed(wrong[g], status[i] == 1)
        return np.array(wrong, dtype=bool), changed
