"""V-Combine's state document: its slots and r-buffer packed into arrays, and rebuilt from
them (after validation) on import."""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from models.core import state as st
from models.core.hypothesis import InstanceCheck
from models.core.instance import Attributes, Experts, InvalidInstance
from models.core.learner import Learner
from models.core.nested import import_children
from models.voting.hypothesis import Packed, hypothesis_fields, rebuild_hypothesis
from models.voting.schedule import Slot, live_window
from models.voting.trial import VotingTrial, link_followers
from models.wrappers.recycling import Recycling

__all__ = ["VotingState"]

#: slot_table_ columns: target, start, end, trial, key (learner, version), seen (learner,
#: version), c_buf, n_buf, c_on, n_on, hypothesis class code, strict.
_TABLE = 14


class VotingState(VotingTrial):
    """Export and import of V-Combine's learned state; see :class:`models.voting.vcombine.VCombine`.

    The slots and the r-buffer live as objects; their arrays are packed when exported and
    rebuilt, after validation, when imported (``Packed``).
    """

    _codes: list[int]
    _checks: list[InstanceCheck]
    _loaded: dict[str, np.ndarray]

    slot_table_ = Packed()
    slot_reals_ = Packed()
    slot_weights_ = Packed()
    buffer_labels_ = Packed()
    buffer_offsets_ = Packed()
    buffer_index_ = Packed()
    buffer_values_ = Packed()

    def _pack_slot_table(self) -> np.ndarray:
        return np.array([t.row() for t in self.slots_], dtype=np.int64).reshape(-1, _TABLE)

    def _pack_slot_reals(self) -> np.ndarray:
        return np.array([hypothesis_fields(t.hypothesis)[2] for t in self.slots_], dtype=np.float64)

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

    # -- refusals (see models.voting.trial) ---------------------------------------------

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
            arrays, self.slots_, self.buffer_ = own
            live = (self.learner_mistakes_, self.recent_mistakes_, self.wm_weights_, self.scalars_)
            for target, value in zip(live, arrays, strict=True):
                target[...] = value
        self._fast, self._fast_tried = None, False  # the members' arrays are theirs again

    def _export_extra(self) -> dict[str, Any]:
        return {f"learner:{i}": inner.export_state() for i, inner in enumerate(self.learners_)}

    def _import_extra(self, children: Mapping[str, Any]) -> None:
        if all(name.startswith("learner.") for name in children):  # the earlier spelling
            children = {name.replace(".", ":", 1): doc for name, doc in children.items()}
        fresh = [inner.clone() for inner in self.learners_]
        import_children(fresh, children, "learner", self.kind)
        link_followers(fresh, self.followers)
        loaded, self._loaded = self._loaded, {}
        slots = self._rebuild_slots(loaded, fresh)
        buffer = self._rebuild_buffer(loaded)
        self.learners_, self.slots_, self.buffer_ = fresh, slots, buffer
        self._fast, self._fast_tried = None, False

    def _rebuild_slots(self, loaded: dict[str, np.ndarray], fresh: list[Learner]) -> list[Slot]:
        table, reals, weights = (loaded[n] for n in ("slot_table_", "slot_reals_", "slot_weights_"))
        tau, s = self.tau_, self.spacing_
        slots, held_rows = [], 0
        for j, row in enumerate(table.tolist()):
            t = (j + 1) * s
            slot = Slot(t, *live_window(t, s, self.h, self.window), trial=row[3])
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
                    slot.hypothesis = rebuild_hypothesis(
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
