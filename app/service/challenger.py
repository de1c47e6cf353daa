"""Shadow challengers: learners that follow a live model's trials without answering.

A challenger is attached to a model at a log version and from then on sees every trial
the live learner learns, in log order: it predicts the trial from what it learned so far,
is judged on the trial's label, then learns it (test, then train). Beside its own
mistakes it counts the live learner's on the same trials (the prediction served, for a
label), so the two are compared on exactly the same trials.

Attaching, retiring and promoting are entries in the model's log (change entries with a
``challenger`` member), so every worker holds the same challengers from the same entry
on and counts the same figures; their states and figures travel with the learner's in
snapshots (:func:`export_model`, :func:`read_model`). Promoting makes the challenger, as
it is at that entry, the model's learner.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from models.core.learner import Learner, UpdateRefused
from models.core.state import InvalidState
from models.registry import build

__all__ = [
    "MAX_CURVE",
    "MODEL_STATE",
    "Challenger",
    "export_model",
    "read_model",
]

MAX_CURVE = 256  # points kept of a challenger's curve; beyond, every other one goes
MODEL_STATE = "committee.model/1"  # a snapshot's format when the model has challengers
_COUNTS = (
    "attached",
    "trials",
    "mistakes",
    "live_mistakes",
    "live_log_mistakes",
    "skipped",
    "stride",
)


class Challenger:
    """A learner ``spec`` named ``name``, attached at log version ``attached``.

    ``trials`` is the trials it was judged on, ``mistakes`` its mistakes among them,
    ``live_mistakes`` the live learner's on the same trials (by the prediction served,
    for a labelled one), ``live_log_mistakes`` the live learner's judged as the
    challenger is (by its prediction as the trial enters the log), ``skipped`` the trials it
    could not learn (a fault of its own, alike on every worker); ``curve`` holds
    ``[trials, mistakes, live_mistakes]`` every ``stride`` trials, at most
    :data:`MAX_CURVE` points (the stride doubles to keep them so).
    """

    __slots__ = (
        "attached",
        "curve",
        "learner",
        "live_log_mistakes",
        "live_mistakes",
        "mistakes",
        "name",
        "skipped",
        "spec",
        "stride",
        "trials",
    )

    def __init__(self, name: str, spec: dict[str, Any], attached: int, learner: Learner) -> None:
        self.name = name
        self.spec = spec
        self.attached = attached
        self.learner = learner
        self.trials = self.mistakes = self.skipped = 0
        self.live_mistakes = self.live_log_mistakes = 0
        self.stride = 1
        self.curve: list[list[int]] = []

    @classmethod
    def fresh(
        cls, name: str, spec: dict[str, Any], attached: int, labels: list[Any], size: int
    ) -> Challenger:
        """A new challenger over ``size`` inputs and ``labels``; the learner's
        :class:`~models.core.params.InvalidParameter` for a spec it cannot build."""
        return cls(name, spec, attached, build(spec, labels=labels, size=size))

    def judge(self, x: Any, y: int, label: Any, served: int, own: int) -> None:
        """Predict ``x``, learn it as ``label`` (class index ``y``), and count the
        mistakes, the live learner having served ``served`` and predicting ``own`` as
        the trial enters the log."""
        try:
            predicted, _ = self.learner.trial(x, label)
        except UpdateRefused as e:  # refused whole: what it predicted still counts
            predicted = e.predicted
        except Exception:  # a fault of this learner on this entry
            self.skipped += 1
            return
        self.trials += 1
        self.mistakes += predicted != y
        self.live_mistakes += served != y
        self.live_log_mistakes += own != y
        if self.trials % self.stride == 0:
            self.curve.append([self.trials, self.mistakes, self.live_mistakes])
            if len(self.curve) > MAX_CURVE:
                self.curve = self.curve[1::2]
                self.stride *= 2

    def grown(self, size: int, kept: np.ndarray, labels: Sequence[Any]) -> None:
        """Grow the learner as the live one grows with a change of input
        (:class:`~models.core.learner.CannotGrow` when it cannot)."""
        self.learner = self.learner.grown(size, kept, labels)

    def figures(self) -> dict[str, Any]:
        """What ``GET .../challengers`` shows of it."""
        t = self.trials
        return {
            "name": self.name,
            "learner": self.spec,
            "attached": self.attached,
            "trials": t,
            "mistakes": self.mistakes,
            "error_rate": self.mistakes / t if t else None,
            "live_mistakes": self.live_mistakes,
            "live_error_rate": self.live_mistakes / t if t else None,
            "live_log_mistakes": self.live_log_mistakes,
            "skipped": self.skipped,
            "curve": [list(p) for p in self.curve],
        }

    def export(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "learner": self.spec,
            "state": self.learner.export_state(),
            "curve": self.curve,
            **{k: getattr(self, k) for k in _COUNTS},
        }

    @classmethod
    def read(cls, doc: Any, labels: list[Any], size: int) -> Challenger:
        """A challenger from :meth:`export`'s document, checked (:class:`InvalidState`)."""
        if not isinstance(doc, dict):
            raise InvalidState("a challenger: expected an object")
        name, spec = doc.get("name"), doc.get("learner")
        if not isinstance(name, str) or not isinstance(spec, dict):
            raise InvalidState("a challenger: expected its name and learner")
        for k in _COUNTS:
            v = doc.get(k)
            if type(v) is not int or v < 0:
                raise InvalidState(f"challenger {name!r}: {k} must be an integer >= 0")
        if doc["stride"] < 1 or doc["stride"] & (doc["stride"] - 1):
            raise InvalidState(f"challenger {name!r}: stride must be a power of two")
        if max(doc["mistakes"], doc["live_mistakes"], doc["live_log_mistakes"]) > doc["trials"]:
            raise InvalidState(f"challenger {name!r}: more mistakes than trials")
        curve = doc.get("curve")
        if not (
            isinstance(curve, list)
            and len(curve) <= MAX_CURVE
            and all(
                isinstance(p, list) and len(p) == 3 and all(type(v) is int and v >= 0 for v in p)
                for p in curve
            )
        ):
            raise InvalidState(
                f"challenger {name!r}: curve must be [trials, mistakes, live] points"
            )
        try:
            c = cls.fresh(name, spec, doc["attached"], labels, size)
        except Exception as e:
            raise InvalidState(f"challenger {name!r}: its learner: {e}") from None
        c.learner.import_state(doc.get("state"))
        for k in _COUNTS:
            setattr(c, k, doc[k])
        c.curve = curve
        return c


def export_model(
    learner: Learner, challengers: dict[str, Challenger], monitors: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A snapshot's state: the learner's own while there are no challengers and no
    monitors (:mod:`app.service.monitors`, given by their exported states), else the
    learner's, the challengers' and the monitors' together."""
    state = learner.export_state()
    if not (challengers or monitors):
        return state
    return {
        "format": MODEL_STATE,
        "learner": state,
        "challengers": [c.export() for c in challengers.values()],
        "monitors": monitors or {},
    }


def read_model(
    doc: Any, learner: Learner, labels: list[Any], size: int
) -> tuple[dict[str, Challenger], Any]:
    """Import a snapshot's state (:func:`export_model`) into ``learner``; its
    challengers, by name, and its monitors' states (None where it has none);
    :class:`InvalidState` for a document that does not fit."""
    if not (isinstance(doc, dict) and doc.get("format") == MODEL_STATE):
        learner.import_state(doc)
        return {}, None
    learner.import_state(doc.get("learner"))
    docs = doc.get("challengers")
    if not isinstance(docs, list):
        raise InvalidState("challengers: expected a list")
    out: dict[str, Challenger] = {}
    for d in docs:
        c = Challenger.read(d, labels, size)
        if c.name in out:
            raise InvalidState(f"challenger {c.name!r} twice")
        out[c.name] = c
    return out, doc.get("monitors")
