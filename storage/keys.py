"""Every Redis key name the service uses, built in this one module.

A model's keys share the hash tag ``{name}``, so in a Redis Cluster they live in one slot
and one Lua script may touch them all::

    <prefix>:models                  set of model names
    <prefix>:{<name>}:meta           hash: config, incarnation, version, counters
    <prefix>:{<name>}:log            stream: applied trials, entry id "<seq>-0"
    <prefix>:{<name>}:snapshot       hash: version, state (the learner at that version)
    <prefix>:{<name>}:pending        sorted set: unlabelled trial id -> deadline (ms)
    <prefix>:{<name>}:trials         sorted set: kept trial id -> purge time (ms)
    <prefix>:{<name>}:curve          list: "<trial>:<mistakes>" points, down-sampled
    <prefix>:{<name>}:window         list: the same every 10 trials, the last 1,000 trials
    <prefix>:{<name>}:summary        string: JSON a worker derives from the learner
    <prefix>:{<name>}:trial:<id>     hash: one prediction (instance, label, outcome)

The Lua scripts derive trial keys from the meta key by replacing its ``meta`` suffix
(``base(meta) .. ':trial:' .. id``), so the layout above must stay in step with them.
"""

from __future__ import annotations

import re

__all__ = ["NAME_PATTERN", "TRIAL_ID_PATTERN", "Keys", "models_key"]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
TRIAL_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
_NAME = re.compile(NAME_PATTERN)


def models_key(prefix: str) -> str:
    return f"{prefix}:models"


class Keys:
    """The keys of one model."""

    __slots__ = (
        "base",
        "curve",
        "log",
        "meta",
        "pending",
        "snapshot",
        "summary",
        "trials",
        "window",
    )

    def __init__(self, prefix: str, name: str) -> None:
        if not _NAME.match(name):
            raise ValueError(f"model name {name!r} does not match {NAME_PATTERN}")
        self.base = f"{prefix}:{{{name}}}"
        self.meta = f"{self.base}:meta"
        self.log = f"{self.base}:log"
        self.snapshot = f"{self.base}:snapshot"
        self.pending = f"{self.base}:pending"
        self.trials = f"{self.base}:trials"
        self.curve = f"{self.base}:curve"
        self.window = f"{self.base}:window"
        self.summary = f"{self.base}:summary"

    def trial(self, trial_id: str) -> str:
        return f"{self.base}:trial:{trial_id}"

    def all_fixed(self) -> list[str]:
        """The keys every script takes, in the order of its KEYS (see storage.scripts)."""
        return [
            self.meta,
            self.log,
            self.snapshot,
            self.pending,
            self.trials,
            self.curve,
            self.window,
            self.summary,
        ]
