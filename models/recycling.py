"""Instance recycling R-B (ALGORITHMS.md §3.3; S4 §VI)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numba import njit

from models._dispatch import (
    ALMA,
    BALANCED,
    COMMITTEE,
    SUBEXPERT_RUNNER_UP,
    learn_any,
    weight_scale,
)
from models._kernels import argmax_first, runner_up, scratch
from models.base import Label, Learner
from models.instance import Attributes, Experts
from models.params import MAX_SIZE, Integer, Labels, Spec
from models.state import InvalidState
from models.wrapper import Wrapper

__all__ = ["Recycling"]


@njit(cache=True, nogil=True)
def _push(a, b, v, c, count, ia, ib, iv, ilen, iy, icnt, ring):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Store an item, dropping the oldest when full; ``ring`` = [oldest slot, size]."""
    s = ilen.shape[0]
    if ring[1] < s:
        slot = (ring[0] + ring[1]) % s
        ring[1] += 1
    else:
        slot = ring[0]
        ring[0] = (ring[0] + 1) % s
    m = a.shape[0]
    ilen[slot] = m
    ia[slot, :m] = a
    ib[slot, :m] = b
    iv[slot, :m] = v
    iy[slot] = c
    icnt[slot] = count


@njit(cache=True, nogil=True, inline="always")
def _item_scores(base, W, scale, ia, ib, iv, j, m, out):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Scores of stored item j for a family with weight form ``base`` (see
    ``effective_weight``), read in place. Each class sums its terms in item order, as the
    family's own trial does, so both predict alike; one loop per form keeps it fast."""
    for c in range(out.shape[0]):
        out[c] = 0.0
    if base == BALANCED:
        for t in range(m):
            i = ia[j, t]
            out[ib[j, t]] += (W[i, 0] - W[i, 1]) * iv[j, t]
    elif base == ALMA:
        for t in range(m):
            out[ib[j, t]] += (scale * W[1, ia[j, t]]) * iv[j, t]
    else:
        for t in range(m):
            out[ib[j, t]] += W[0, ia[j, t]] * iv[j, t]


@njit(cache=True, nogil=True, inline="always")
def _item_is_settled(ia, ib, iv, j, m, yj, s, mass, P, limit, roots):  # type: ignore[no-untyped-def]  # pragma: no cover
    """True when a runner-up sub-expert learner certainly makes no update on item j, whose
    scores are ``s``.

    That needs a correct prediction with s_y - s_c above the learner's margin threshold
    (``limit``, 0 for learners other than ALMA, whose ``P[0]`` is p) times ||z||_p, where
    c is the runner-up and z = x^y - x^c. By Minkowski's inequality ||z||_p <= ||x^y||_p +
    ||x^c||_p, so the test is cheap and conservative (a small slack covers rounding);
    undecided items take the full trial. ``roots[i]`` holds i ** (1/p) for the whole
    masses of one-hot votes.
    """
    if argmax_first(s) != yj:
        return False
    c = runner_up(s, yj)
    gap = s[yj] - s[c] - 1e-9 * (abs(s[yj]) + abs(s[c]))
    if limit == 0.0:
        return gap > 0.0
    for e in range(mass.shape[0]):
        mass[e] = 0.0
    for t in range(m):
        v = iv[j, t]
        mass[ib[j, t]] += 1.0 if abs(v) == 1.0 else abs(v) ** P[0]
    return gap > limit * (_root(mass[yj], P[0], roots) + _root(mass[c], P[0], roots))


@njit(cache=True, nogil=True, inline="always")
def _root(mass, p, roots):  # type: ignore[no-untyped-def]  # pragma: no cover
    """mass ** (1/p), looked up when mass is a whole number in the table."""
    if mass < roots.shape[0] and mass == np.floor(mass):
        return roots[int(mass)]
    return mass ** (1.0 / p)


@njit(cache=True, nogil=True)
def _trial(fam, W, S, P, k, a, b, v, c, ia, ib, iv, ilen, iy, icnt, ring, internal, u, wf, wi):  # type: ignore[no-untyped-def]  # pragma: no cover
    """One real trial then, after an update, recycling passes until one changes nothing.

    Labels are class indices; binary families (below COMMITTEE) see them as +1/-1.
    ``internal`` counts internal trials, mistakes and updates. Returns (prediction, status).
    An item is not tried again while the learner has not updated since it last left the
    learner unchanged: the same state would give the same outcome, which is counted again.
    """
    binary = fam < COMMITTEE
    y = 1 - 2 * c if binary else c
    pred, status = learn_any(fam, W, S, P, a, b, v, k, y, wf, wi)
    if status == 2:
        return pred, status
    _push(a, b, v, c, 1 if status == 1 else 0, ia, ib, iv, ilen, iy, icnt, ring)
    if status == 0:
        return pred, status
    s = ilen.shape[0]
    # Families that update only on mistakes are first asked for a prediction in place, and
    # only a wrong one goes through the full trial.
    on_mistakes = COMMITTEE <= fam < SUBEXPERT_RUNNER_UP
    runner_up_family = fam >= SUBEXPERT_RUNNER_UP
    base = fam % 100
    alma = runner_up_family and base == ALMA
    scores, mass = np.empty(k), np.empty(k)  # (no slices in the loop: a view costs)
    roots = np.empty(ia.shape[1] + 1 if alma else 0)
    for i in range(roots.shape[0]):
        roots[i] = float(i) ** (1.0 / P[0])
    updates = 0  # internal updates so far in this trial
    unchanged = np.full(s, -1)  # item j last left the learner unchanged after that many
    wrong = np.zeros(s, dtype=np.bool_)  # ... and whether that was an internal mistake
    scaled = -1  # the number of updates when scale and limit were last computed
    scale = limit = 0.0
    changed = True
    while changed:
        changed = False
        for r in range(ring[1]):  # oldest to newest
            j = (ring[0] + r) % s
            if icnt[j] >= u:
                continue
            internal[0] += 1
            if unchanged[j] == updates:
                internal[1] += wrong[j]
                continue
            yj = 1 - 2 * iy[j] if binary else iy[j]
            m = ilen[j]
            unchanged[j], wrong[j] = updates, False
            if scaled != updates:
                scale, scaled = weight_scale(base, S, P), updates
                if alma:  # update iff margin / ||z||_p <= (1 - alpha) B sqrt(p-1) / sqrt(k)
                    limit = (1.0 - P[1]) * P[2] * np.sqrt(P[0] - 1.0) / np.sqrt(S[2])
            if on_mistakes or runner_up_family:
                _item_scores(base, W, scale, ia, ib, iv, j, m, scores)
                if on_mistakes and argmax_first(scores) == yj:
                    continue
                if runner_up_family and _item_is_settled(
                    ia, ib, iv, j, m, yj, scores, mass, P, limit, roots
                ):
                    continue
            p2, st2 = learn_any(fam, W, S, P, ia[j, :m], ib[j, :m], iv[j, :m], k, yj, wf, wi)
            wrong[j] = p2 != yj
            internal[1] += wrong[j]
            if st2 == 1:
                icnt[j] += 1
                internal[2] += 1
                updates += 1
                unchanged[j] = -1
                changed = True
            elif st2 == 2:  # an update the learner refuses: retire the item
                icnt[j] = u
    return pred, status


class Recycling(Wrapper):
    """Instance recycling: after each update, re-learn recent instances until consistent.

    R-B predicts and learns exactly like B on every real trial and stores the last ``size``
    real instances with a count of the updates each caused (the real one included). After a
    real update it makes passes over the store, oldest to newest, presenting every item whose
    count is below ``max_updates`` to B as an internal trial, until a whole pass changes
    nothing. Internal mistakes and updates are counted apart from the real ones
    (``internal_``); ``version_`` moves with every change of B's hypothesis.

    With ``max_updates=1`` every instance, noisy or not, costs at most one update, which
    keeps B's adversarial mistake bound. S4 lifts the cap on noise-free data; here it is
    always finite (at most 10,000), so a trial makes at most size * max_updates + 1 passes
    even when the data are noisy. Basic learners run the whole trial in one compiled loop.

    Parameters
    ----------
    learner
        Spec of the learner B.
    size
        Number of recent instances kept (s).
    max_updates
        Updates allowed per stored instance (u).
    labels, n_features, n_experts
        Supplied by the model; B gets the same.

    Examples
    --------
    >>> rb = Recycling({"kind": "perceptron"}, size=10, max_updates=5, n_features=2)
    >>> rb.learn([1.0, 0.0], 1).mistake, rb.learn([0.0, 1.0], -1).mistake
    (False, True)
    """

    kind = "recycling"
    _parameter_constraints = {
        "learner": Spec(),
        "size": Integer(1, 100_000),
        "max_updates": Integer(0, 10_000),
        "labels": Labels(),
        "n_features": Integer(1, MAX_SIZE, optional=True),
        "n_experts": Integer(1, MAX_SIZE, optional=True),
    }
    _state_arrays = {
        "items_v_": "float64",
        "items_a_": "int64",
        "items_b_": "int64",
        "items_len_": "int64",
        "items_y_": "int64",
        "items_count_": "int64",
        "ring_": "int64",
        "internal_": "int64",
    }

    def __init__(
        self,
        learner: Mapping[str, Any] | Learner,
        size: int = 100,
        max_updates: int = 5,
        labels: Sequence[Label] = (1, -1),
        n_features: int | None = None,
        n_experts: int | None = None,
    ) -> None:
        self.learner = learner
        self.size = size
        self.max_updates = max_updates
        self.labels = labels  # type: ignore[assignment]
        self.n_features = n_features
        self.n_experts = n_experts
        self._initialise()

    def _check_params(self) -> None:
        super()._check_params()
        self._u = int(self.max_updates)

    def _reset_state(self) -> None:
        super()._reset_state()
        s = self.size
        self.items_a_ = np.zeros((s, 1), dtype=np.int64)
        self.items_b_ = np.zeros((s, 1), dtype=np.int64)
        self.items_v_ = np.zeros((s, 1))
        self.items_len_ = np.zeros(s, dtype=np.int64)
        self.items_y_ = np.zeros(s, dtype=np.int64)
        self.items_count_ = np.zeros(s, dtype=np.int64)
        self.ring_ = np.zeros(2, dtype=np.int64)
        self.internal_ = np.zeros(3, dtype=np.int64)

    def _array_shapes(self) -> dict[str, tuple[int, ...]]:
        s = self.size
        return {
            "items_a_": (s, -1),
            "items_b_": (s, -1),
            "items_v_": (s, -1),
            "items_len_": (s,),
            "items_y_": (s,),
            "items_count_": (s,),
            "ring_": (2,),
            "internal_": (3,),
        }

    def _check_state(self) -> None:
        s, width = self.items_a_.shape
        if self.items_b_.shape != (s, width) or self.items_v_.shape != (s, width) or width < 1:
            raise InvalidState("recycling: stored items have inconsistent widths")
        oldest, count = (int(v) for v in self.ring_)
        if not (0 <= oldest < s and 0 <= count <= s) or (self.internal_ < 0).any():
            raise InvalidState("recycling: ring position or counters out of range")
        lens = self.items_len_
        if (lens < 0).any() or (lens > width).any():
            raise InvalidState("recycling: stored item lengths out of range")
        if (self.items_y_ < 0).any() or (self.items_y_ >= len(self.labels)).any():
            raise InvalidState("recycling: stored labels out of range")
        if (self.items_count_ < 0).any():
            raise InvalidState("recycling: update counts must be >= 0")
        for j in range(s):
            m = int(lens[j])
            a, b = self.items_a_[j, :m], self.items_b_[j, :m]
            if (a < 0).any() or (a >= self.input_size).any() or (b < 0).any():
                raise InvalidState(f"recycling: stored item {j} is out of range")
            if self.input_kind == "experts" and (b >= len(self.labels)).any():
                raise InvalidState(f"recycling: stored item {j} votes for an unknown class")

    @property
    def internal_trials_(self) -> int:
        return int(self.internal_[0])

    @property
    def internal_mistakes_(self) -> int:
        return int(self.internal_[1])

    @property
    def internal_updates_(self) -> int:
        return int(self.internal_[2])

    def _arrays(self, x: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if isinstance(x, Attributes):
            return x.indices, np.zeros(x.indices.size, dtype=np.int64), x.values
        return x.expert, x.cls, x.value

    def _widen(self, width: int) -> None:
        s, old = self.items_a_.shape
        for name in ("items_a_", "items_b_", "items_v_"):
            arr = getattr(self, name)
            wide = np.zeros((s, max(width, 2 * old)), dtype=arr.dtype)
            wide[:, :old] = arr
            setattr(self, name, wide)

    def _scores(self, x: Any) -> np.ndarray:
        return self.learner_._scores(x)

    def _predict(self, x: Any) -> int:
        return self.learner_._predict(x)

    def _learn(self, x: Any, c: int) -> tuple[int, bool]:
        a, b, v = self._arrays(x)
        if a.size > self.items_a_.shape[1]:
            self._widen(a.size)
        state = self.learner_.kernel_state()
        before = int(self.internal_[2])
        if state is None:
            pred, status = self._generic_trial(x, c, a, b, v)
        else:
            fam, W, S, P = state
            wf, wi = scratch(len(self.labels), self.items_a_.shape[1])
            pred, status = _trial(
                fam, W, S, P, len(self.labels), a, b, v, c,
                self.items_a_, self.items_b_, self.items_v_, self.items_len_,
                self.items_y_, self.items_count_, self.ring_, self.internal_, self._u, wf, wi,
            )  # fmt: skip
            if status == 2:
                raise OverflowError(f"{self.learner_.kind} refused an update that would overflow")
            if fam < COMMITTEE:
                pred = 0 if pred > 0 else 1
        internal_updates = int(self.internal_[2]) - before
        self.version_ += internal_updates
        self.learner_.version_ += internal_updates + (1 if status == 1 else 0)
        return int(pred), status == 1

    def _item(self, j: int) -> Any:
        m = int(self.items_len_[j])
        a, b, v = self.items_a_[j, :m], self.items_b_[j, :m], self.items_v_[j, :m]
        return Attributes(a, v) if self.input_kind == "attributes" else Experts(a, b, v)

    def _generic_trial(
        self, x: Any, c: int, a: np.ndarray, b: np.ndarray, v: np.ndarray
    ) -> tuple[int, int]:
        """The same algorithm through the inner learner's public ``learn``."""
        pred = self.learner_._predict(x)
        outcome = self.learner_.learn(x, self.labels[c])
        status = 1 if outcome.updated else 0
        _push(a, b, v, c, status, self.items_a_, self.items_b_, self.items_v_,
              self.items_len_, self.items_y_, self.items_count_, self.ring_)  # fmt: skip
        changed = bool(status)
        while changed:
            changed = False
            s = self.size
            for r in range(int(self.ring_[1])):
                j = (int(self.ring_[0]) + r) % s
                if self.items_count_[j] >= self._u:
                    continue
                inner = self.learner_.learn(self._item(j), self.labels[int(self.items_y_[j])])
                self.internal_[0] += 1
                self.internal_[1] += int(inner.mistake)
                if inner.updated:
                    self.items_count_[j] += 1
                    self.internal_[2] += 1
                    changed = True
        return pred, status

    def support(self, x: Any) -> np.ndarray:
        """Recycling may change any coordinate of the stored instances."""
        lens = self.items_len_
        if int(lens.sum()) >= self.input_size:  # cheaper to say: any coordinate
            return np.arange(self.input_size)
        mask = np.arange(self.items_a_.shape[1])[None, :] < lens[:, None]
        return np.unique(np.concatenate([super().support(x), self.items_a_[mask]]))

    def snapshot(self) -> Any:
        return self.learner_.snapshot()

    def weights(self) -> np.ndarray:
        return self.learner_.weights()  # type: ignore[attr-defined]
