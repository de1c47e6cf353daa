"""Instance recycling R-B (Mesterharm & Hsu, §VI).

Refusals: roll back. The internal passes are part of the trial, so when B refuses any
update of a trial, real or internal, the whole trial is undone. A checkpoint, taken only
when B can refuse, keeps the store's small arrays, the one row a push overwrites, and B's
state at the coordinates the trial may touch (the instance's and the stored items'): B's
own rows when the compiled loop runs, else a journal of B's trials.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from models.core.hypothesis import Label
from models.core.instance import Attributes, Experts
from models.core.learner import Learner, Outcome, Spec, UpdateRefused
from models.core.nested import Wrapper
from models.core.params import MAX_SIZE, Integer, Labels
from models.core.state import InvalidState
from models.kernels.common import scratch
from models.kernels.families import COMMITTEE
from models.kernels.recycling import learn_and_recycle, push

__all__ = ["Recycling"]


class Recycling(Wrapper):
    """Instance recycling: after each update, re-learn recent instances until consistent.

    R-B predicts and learns exactly like B on every real trial and stores the last ``size``
    real instances with a count of the updates each caused (the real one included). After a
    real update it makes passes over the store, oldest to newest, presenting every item whose
    count is below ``max_updates`` to B as an internal trial, until a whole pass changes
    nothing. Internal mistakes and updates are counted apart from the real ones
    (``internal_``); ``version_`` moves with every change of B's hypothesis.

    With ``max_updates=1`` every instance, noisy or not, costs at most one update, which
    keeps B's adversarial mistake bound. Mesterharm & Hsu lift the cap on noise-free data;
    here it is always finite (at most 10,000), so a trial makes at most
    size * max_updates + 1 passes even when the data are noisy. Basic learners run the whole
    trial in one compiled loop.

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

    def _take(self, old: Learner, at: np.ndarray) -> None:
        """B grows as its kind does; the stored instances keep their values, their
        coordinates renumbered (new labels come last, so their classes stand)."""
        assert isinstance(old, Recycling)
        self.learner_._adopt(old.learner_, at)
        for name in ("items_b_", "items_v_", "items_len_", "items_y_", "items_count_"):
            setattr(self, name, getattr(old, name).copy())
        self.ring_, self.internal_ = old.ring_.copy(), old.internal_.copy()
        width = old.items_a_.shape[1]
        used = np.arange(width)[None, :] < old.items_len_[:, None]
        self.items_a_ = np.where(used, at[np.where(used, old.items_a_, 0)], 0)

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
            pred, status = learn_and_recycle(
                fam, W, S, P, len(self.labels), a, b, v, c,
                self.items_a_, self.items_b_, self.items_v_, self.items_len_,
                self.items_y_, self.items_count_, self.ring_, self.internal_, self._u, wf, wi,
            )  # fmt: skip
            if fam < COMMITTEE:
                pred = 0 if pred > 0 else 1
            if status == 2:
                kind = self.learner_.kind
                raise UpdateRefused(f"{kind} refused an update that would overflow", pred)
        internal_updates = int(self.internal_[2]) - before
        self.moved(internal_updates)
        self._inner_moved(internal_updates, status == 1)
        return int(pred), status == 1

    def _inner_moved(self, internal_updates: int, updated: bool) -> None:
        """B's hypothesis changed with each recycled update and with the trial's own."""
        if internal_updates or updated:
            self.learner_.moved(internal_updates + updated)

    def count_recycled(self, mistake: bool, updated: bool, internal_updates: int) -> None:
        """Count a trial whose recycling ran outside :meth:`learn` (V-Combine's compiled
        trial): the trial itself and the changes of B's hypothesis it made."""
        self.count(mistake, updated, internal_updates)
        self._inner_moved(internal_updates, updated)

    def _save(self, x: Any, whole: bool) -> Any:
        oldest, count = (int(v) for v in self.ring_)
        slot = (oldest + count) % self.size if count < self.size else oldest
        store = (self.items_a_, self.items_b_, self.items_v_)  # a widening replaces them
        small = (self.items_len_, self.items_y_, self.items_count_, self.ring_, self.internal_)
        inner = self.learner_
        kept = None  # B's trials journal themselves, unless the compiled loop runs them
        if inner.kernel_state() is not None:
            kept = inner._save_at(self.support(x)), tuple(inner.counters().values())
        return slot, store, [a[slot].copy() for a in store], [a.copy() for a in small], kept

    def _restore(self, saved: Any) -> None:
        slot, store, rows, small, kept = saved
        if kept is not None:
            inner, (saved_inner, counters) = self.learner_, kept
            inner._restore_at(saved_inner)
            inner.trials_, inner.mistakes_, inner.updates_, inner.version_ = counters
        self.items_a_, self.items_b_, self.items_v_ = store
        for live, row in zip(store, rows, strict=True):
            live[slot] = row
        live_small = (self.items_len_, self.items_y_, self.items_count_, self.ring_, self.internal_)
        for live, copy in zip(live_small, small, strict=True):
            live[...] = copy

    def _item(self, j: int) -> Any:
        m = int(self.items_len_[j])
        a, b, v = self.items_a_[j, :m], self.items_b_[j, :m], self.items_v_[j, :m]
        return Attributes(a, v) if self.input_kind == "attributes" else Experts(a, b, v)

    def _generic_trial(
        self, x: Any, c: int, a: np.ndarray, b: np.ndarray, v: np.ndarray
    ) -> tuple[int, int]:
        """The same algorithm through the inner learner's public ``learn``."""
        pred = self.learner_._predict(x)
        status = 1 if self._inner_learns(x, c).updated else 0
        push(a, b, v, c, status, self.items_a_, self.items_b_, self.items_v_,
              self.items_len_, self.items_y_, self.items_count_, self.ring_)  # fmt: skip
        changed = bool(status)
        while changed:
            changed = False
            s = self.size
            for r in range(int(self.ring_[1])):
                j = (int(self.ring_[0]) + r) % s
                if self.items_count_[j] >= self._u:
                    continue
                inner = self._inner_learns(self._item(j), int(self.items_y_[j]))
                self.internal_[0] += 1
                self.internal_[1] += int(inner.mistake)
                if inner.updated:
                    self.items_count_[j] += 1
                    self.internal_[2] += 1
                    changed = True
        return pred, status

    def _inner_learns(self, x: Any, c: int) -> Outcome:
        return self._member_learns(self.learner_, x, self.labels[c])

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
