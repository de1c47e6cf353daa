"""Monitors: what follows a model's judged trials beside its learner.

A monitor sees every trial the model's learner is judged on, in log order, on every
worker alike (:class:`~app.service.live_model.LiveModel` calls it as it replays the log),
so what it counts is a function of the log: every worker holds the same figures. Its
state travels with the learner's in snapshots, so a worker that starts from one carries
on where the others are.

Each kind of monitor (:class:`~app.service.monitor.Kind`, in a module of its own) is
registered in :data:`KINDS` under its name, with whether it follows a model of a given
input and learner. When the learner changes in the log (a change of the input grows it,
a promote replaces it) :func:`relearned` hands every monitor the new one, builds those
that now follow the model and drops those that no longer do. A state import or a
rollback keeps the monitors as they are (they count trials, which neither undoes); a
monitor read from the snapshot that follows is handed the learner there, and the bound
watch restarts its count when the learner's parameters differ from those it counted
under (:mod:`app.service.bound_watch`).
"""

from __future__ import annotations

from typing import Any

from app.service import bound_watch, drift_watch, scorecards
from app.service.monitor import Kind, Monitor
from models.core.learner import Learner
from models.core.state import InvalidState
from models.inputs.space import InputSpace

__all__ = ["KINDS", "fresh_monitors", "read_monitors", "relearned"]


#: the kinds of monitor, by name (the name keys the monitor's state in snapshots)
KINDS: dict[str, Kind] = {
    scorecards.NAME: scorecards.KIND,
    drift_watch.NAME: drift_watch.KIND,
    bound_watch.NAME: bound_watch.KIND,
}


def fresh_monitors(space: InputSpace, form: str, learner: Learner) -> dict[str, Monitor]:
    """A new monitor of every kind that follows a model of ``space``, ``form`` and
    ``learner``."""
    return {
        name: k.fresh(space, form, learner)
        for name, k in KINDS.items()
        if k.follows(space, form, learner)
    }


def read_monitors(docs: Any, space: InputSpace, form: str, learner: Learner) -> dict[str, Monitor]:
    """The monitors of a snapshot's state (``docs``: their states by name; None: a
    snapshot made before it had any), its learner ``learner``: each that follows the
    model read from its state, or new when the snapshot has none of its kind."""
    if docs is None:
        docs = {}
    if not isinstance(docs, dict):
        raise InvalidState("monitors: expected an object")
    out = {}
    for name, k in KINDS.items():
        if k.follows(space, form, learner):
            out[name] = (
                k.read(docs[name], space, form, learner)
                if name in docs
                else k.fresh(space, form, learner)
            )
    return out


def relearned(
    monitors: dict[str, Monitor], space: InputSpace, form: str, learner: Learner
) -> dict[str, Monitor]:
    """The monitors once the model's learner is ``learner`` (over ``space``): each kept
    that still follows the model, handed the learner; a new one of each kind that follows
    it now and did not; none of a kind that no longer follows it."""
    out = {}
    for name, k in KINDS.items():
        if not k.follows(space, form, learner):
            continue
        mon = monitors.get(name)
        if mon is None:
            mon = k.fresh(space, form, learner)
        else:
            mon.relearned(learner)
        out[name] = mon
    return out
