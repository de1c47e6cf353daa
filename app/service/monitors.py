"""Monitors: what follows a model's judged trials beside its learner.

A monitor sees every trial the model's learner is judged on, in log order, on every
worker alike (:class:`~app.service.live_model.LiveModel` calls it as it replays the log),
so what it counts is a function of the log: every worker holds the same figures. Its
state travels with the learner's in snapshots, so a worker that starts from one carries
on where the others are. A state import or a rollback keeps the monitors as they are:
they count trials, which neither undoes.

Each kind of monitor (:class:`~app.service.monitor.Kind`, in a module of its own) is
registered in :data:`KINDS` under its name, with whether it follows a model of a given
input.
"""

from __future__ import annotations

from typing import Any

from app.service import drift_watch, scorecards
from app.service.monitor import Kind, Monitor
from models.core.state import InvalidState
from models.inputs.space import InputSpace

__all__ = ["KINDS", "fresh_monitors", "read_monitors"]


#: the kinds of monitor, by name (the name keys the monitor's state in snapshots)
KINDS: dict[str, Kind] = {
    scorecards.NAME: scorecards.KIND,
    drift_watch.NAME: drift_watch.KIND,
}


def fresh_monitors(space: InputSpace, form: str) -> dict[str, Monitor]:
    """A new monitor of every kind that follows a model of ``space`` and ``form``."""
    return {name: k.fresh(space, form) for name, k in KINDS.items() if k.follows(space, form)}


def read_monitors(docs: Any, space: InputSpace, form: str) -> dict[str, Monitor]:
    """The monitors of a snapshot's state (``docs``: their states by name; None: a
    snapshot made before it had any): each that follows the model read from its state,
    or new when the snapshot has none of its kind."""
    if docs is None:
        docs = {}
    if not isinstance(docs, dict):
        raise InvalidState("monitors: expected an object")
    out = {}
    for name, k in KINDS.items():
        if k.follows(space, form):
            out[name] = k.read(docs[name], space, form) if name in docs else k.fresh(space, form)
    return out
