"""The model store: models, their trials, logs, snapshots and statistics under one key
prefix of one Redis, each concern a part of :mod:`storage.store` that
:class:`ModelStore` composes and whose calls it offers as its own."""

from __future__ import annotations

from storage.client import Clients
from storage.errors import LogGap, NotDurable
from storage.store.calls import Calls, new_stamp, position
from storage.store.history import History
from storage.store.lifecycle import GRAVE_BATCH, Lifecycle
from storage.store.records import (
    Created,
    Idempotency,
    LabelResult,
    LearnGroup,
    LearnResult,
    PredictResult,
    RawEntry,
    Saved,
    Snapshot,
    Statistics,
    StoredModel,
    Sync,
    input_of,
    read_space,
    with_space,
)
from storage.store.statistics import StatisticsReader
from storage.store.trials import Trials

__all__ = [
    "GRAVE_BATCH",
    "Created",
    "Idempotency",
    "LabelResult",
    "LearnGroup",
    "LearnResult",
    "LogGap",
    "ModelStore",
    "NotDurable",
    "PredictResult",
    "RawEntry",
    "Saved",
    "Snapshot",
    "Statistics",
    "StoredModel",
    "Sync",
    "input_of",
    "new_stamp",
    "position",
    "read_space",
    "with_space",
]


class ModelStore:
    """Models and their trials under one key prefix of one Redis.

    ``calls`` runs the scripts; ``models``, ``trials``, ``history`` and ``statistics``
    are the parts, each over ``calls``, and their calls are the store's.
    """

    def __init__(
        self, clients: Clients, prefix: str, *, ack: str = "applied", ack_timeout_ms: int = 1000
    ) -> None:
        self.calls = calls = Calls(clients, prefix, ack=ack, ack_timeout_ms=ack_timeout_ms)
        self.prefix = prefix
        self.client = calls.client
        self.registry = calls.registry
        self.keys = calls.keys
        self.check_server = calls.check_server
        self.ping = calls.ping

        self.models = models = Lifecycle(calls)
        self.create = models.create
        self.delete = models.delete
        self.sweep = models.sweep
        self.adopt_legacy = models.adopt_legacy
        self.names = models.names
        self.read = models.read

        self.trials = trials = Trials(calls)
        self.sync = trials.sync
        self.predict = trials.predict
        self.label = trials.label
        self.learn = trials.learn
        self.read_outcome = trials.read_outcome
        self.keep_answer = trials.keep_answer
        self.learn_outcomes = trials.learn_outcomes

        self.history = history = History(calls)
        self.read_log = history.read_log
        self.read_log_fields = history.read_log_fields
        self.log_bounds = history.log_bounds
        self.save_snapshot = history.save_snapshot
        self.read_snapshot = history.read_snapshot
        self.read_previous = history.read_previous
        self.import_state = history.import_state
        self.change = history.change
        self.earlier = history.earlier

        self.statistics = statistics = StatisticsReader(calls)
        self.read_statistics = statistics.read_statistics
        self.save_summary = statistics.save_summary
