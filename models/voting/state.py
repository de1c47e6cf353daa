"""V-Combine's state document: its slots and r-buffer packed into arrays, and rebuilt from
them (after validation) on import."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from models.core import state as st
from models.core.hypothesis import InstanceCheck, Label
from models.core.instance import Attributes, Experts, InvalidInstance
from models.core.learner import Learner
from models.voting.grow import untouched_weight
from models.voting.hypothesis import hypothesis_fields, rebuild_hypothesis
from models.voting.schedule import Slot, live_window

__all__ = [
    "STATE_ARRAYS",
    "Packed",
    "array_shapes",
    "check_counters",
    "pack_buffer_index",
    "pack_buffer_labels",
    "pack_buffer_offsets",
    "pack_buffer_values",
    "pack_slot_reals",
    "pack_slot_table",
    "pack_slot_weights",
    "rebuild_buffer",
    "rebuild_slots",
]

#: Per learner: total mistakes, mistakes since the last restart, WM weight; scalars_ =
#: [tau, spacing, restarts, vote mistakes since the last restart]; the slots (a table, the
#: hypotheses' reals then the weight an untouched coordinate has in each, and one weight
#: row per held slot, in slot order) and the r-buffer (labels, offsets into the
#: concatenated index and value arrays), oldest first.
STATE_ARRAYS = {
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

#: slot_table_ columns: target, start, end, trial, key (learner, version), seen (learner,
#: version), c_buf, n_buf, c_on, n_on, hypothesis class code, strict.
TABLE = 14

Buffer = deque[tuple[Any, int]]


class Packed:
    """A state array packed from the live slots or buffer when read (export); an imported
    value waits in the owner's ``_loaded`` until its children are imported and the slots
    and buffer are rebuilt from it."""

    def __init__(self, pack: Callable[[Any], np.ndarray]) -> None:
        self.pack = pack

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return self.pack(obj)

    def __set__(self, obj: Any, value: np.ndarray) -> None:
        obj._loaded[self.name] = value


# -- export ---------------------------------------------------------------------------------


def pack_slot_table(slots: Sequence[Slot]) -> np.ndarray:
    return np.array([t.row() for t in slots], dtype=np.int64).reshape(-1, TABLE)


def pack_slot_reals(slots: Sequence[Slot]) -> np.ndarray:
    reals = [hypothesis_fields(t.hypothesis)[2] for t in slots]
    return np.array(reals + [t.untouched for t in slots], dtype=np.float64)


def pack_slot_weights(slots: Sequence[Slot], size: int) -> np.ndarray:
    rows = [t.hypothesis.weights for t in slots if t.hypothesis is not None]  # type: ignore[attr-defined]
    return np.array(rows, dtype=np.float64).reshape(len(rows), size)


def pack_buffer_labels(buffer: Buffer) -> np.ndarray:
    return np.array([c for _, c in buffer], dtype=np.int64)


def pack_buffer_offsets(buffer: Buffer) -> np.ndarray:
    return np.cumsum([0] + [len(x) for x, _ in buffer], dtype=np.int64)


def pack_buffer_index(buffer: Buffer, input_kind: str) -> np.ndarray:
    names = ("indices",) if input_kind == "attributes" else ("expert", "cls")
    cols = [[getattr(x, n) for x, _ in buffer] for n in names]
    return np.stack([np.concatenate([*c, np.zeros(0, np.int64)]) for c in cols], axis=1)


def pack_buffer_values(buffer: Buffer, input_kind: str) -> np.ndarray:
    name = "values" if input_kind == "attributes" else "value"
    return np.concatenate([*(getattr(x, name) for x, _ in buffer), np.zeros(0)])


# -- import ---------------------------------------------------------------------------------


def array_shapes(v: int, h: int, size: int, input_kind: str) -> dict[str, tuple[int, ...]]:
    """The shape of each state array for v learners, h slots and instances of ``size``."""
    return {
        "learner_mistakes_": (v,),
        "recent_mistakes_": (v,),
        "wm_weights_": (v,),
        "scalars_": (4,),
        "slot_table_": (h, TABLE),
        "slot_reals_": (-1,),
        "slot_weights_": (-1, size),
        "buffer_labels_": (-1,),
        "buffer_offsets_": (-1,),
        "buffer_index_": (-1, 1 if input_kind == "attributes" else 2),
        "buffer_values_": (-1,),
    }


def check_counters(
    scalars: np.ndarray, mistakes: np.ndarray, recent: np.ndarray, weights: np.ndarray, h: int
) -> None:
    """Refuse counters no sequence of trials can produce."""
    tau, s, rho, m_v = (int(a) for a in scalars)
    if not (
        s >= 1
        and s & (s - 1) == 0
        and 0 <= tau < h * s
        and 0 <= rho <= 62
        and 0 <= m_v <= tau
        and (recent >= 0).all()
        and (mistakes >= 0).all()
        and (recent <= mistakes).all()
        and (recent <= tau).all()
        and ((weights >= 0) & (weights <= 1)).all()
    ):
        raise st.InvalidState("v-combine counters are inconsistent")


def rebuild_slots(
    loaded: dict[str, np.ndarray],
    fresh: Sequence[Learner],
    scalars: np.ndarray,
    h: int,
    w: int,
    r: int,
    codes: Sequence[int],
    checks: Sequence[InstanceCheck],
    labels: tuple[Label, ...],
) -> list[Slot]:
    """The slots of an imported state, each row checked against the schedule."""
    table, reals, weights = (loaded[n] for n in ("slot_table_", "slot_reals_", "slot_weights_"))
    if reals.shape[0] not in (h, 2 * h):
        raise st.InvalidState(f"state.arrays.slot_reals_: expected {2 * h} reals")
    # A state kept before the untouched weights were has h reals: the member's own now is
    # the best guess (exact unless it rescaled, or is an average, since).
    untouched = reals[h:] if reals.shape[0] == 2 * h else None
    tau, s = int(scalars[0]), int(scalars[1])
    slots, held_rows = [], 0
    for j, row in enumerate(table.tolist()):
        t = (j + 1) * s
        slot = Slot(t, *live_window(t, s, h, w), trial=row[3])
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
                and code == codes[learner]
                and strict in (0, 1)
                and slot.start <= slot.trial <= min(slot.end, tau)
                and 0 <= slot.c_buf <= slot.n_buf <= r
                and 0 <= slot.c_on <= slot.n_on <= tau
            )
            if ok:
                slot.hypothesis = rebuild_hypothesis(
                    code,
                    strict,
                    float(reals[j]),
                    weights[held_rows],
                    labels,
                    checks[learner],
                )
                held_rows += 1
                slot.untouched = (
                    untouched_weight(fresh[learner]) if untouched is None else float(untouched[j])
                )
        else:
            ok = ok and not any(row[3:]) and reals[j] == 0
            ok = ok and (untouched is None or untouched[j] == 0)
        if not ok:
            raise st.InvalidState(f"state.arrays.slot_table_[{j}]: inconsistent with the schedule")
        slots.append(slot)
    if held_rows != weights.shape[0]:
        raise st.InvalidState("state.arrays.slot_weights_: one row per held slot expected")
    return slots


def rebuild_buffer(
    loaded: dict[str, np.ndarray], r: int, n_classes: int, input_kind: str, check: InstanceCheck
) -> Buffer:
    """The r-buffer of an imported state, each instance checked as on arrival."""
    labels, offsets, index, values = (
        loaded[n] for n in ("buffer_labels_", "buffer_offsets_", "buffer_index_", "buffer_values_")
    )
    if (
        labels.size > r
        or offsets.shape != (labels.size + 1,)
        or offsets[0] != 0
        or (np.diff(offsets) < 0).any()
        or offsets[-1] != values.size
        or index.shape[0] != values.size
        or ((labels < 0) | (labels >= n_classes)).any()
    ):
        raise st.InvalidState("state.arrays.buffer_*: inconsistent buffer")
    out: deque[tuple[Any, int]] = deque(maxlen=r)
    for i, c in enumerate(labels.tolist()):
        part = slice(offsets[i], offsets[i + 1])
        try:
            if input_kind == "attributes":
                x: Any = Attributes(index[part, 0], values[part])
            else:
                x = Experts(index[part, 0], index[part, 1], values[part])
            check.fit(x)
        except InvalidInstance as exc:
            raise st.InvalidState(f"state.arrays.buffer_*: instance {i}: {exc}") from None
        out.append((x, c))
    return out
