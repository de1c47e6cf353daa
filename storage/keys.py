"""Every Redis key name the service uses, built in this one module, and the one check of
the names and ids that go into them.

A model's keys share the hash tag ``{name}``, so in a Redis Cluster they live in one slot
and one Lua script may touch them all::

    <prefix>:models                      set of model names
    <prefix>:graves                      set of grave keys still to sweep
    <prefix>:{<name>}:meta               hash: config, incarnation, version, counters
    <prefix>:{<name>}:log                stream: applied trials, entry id "<seq>-0"
    <prefix>:{<name>}:snapshot           hash: version, state (the learner at that version)
    <prefix>:{<name>}:pending            sorted set: unlabelled trial id -> deadline (ms)
    <prefix>:{<name>}:trials             sorted set: kept trial id -> purge time (ms)
    <prefix>:{<name>}:curve              list: "<trial>:<mistakes>" points, down-sampled
    <prefix>:{<name>}:window             list: the same every 10 trials, the last 1,000 trials
    <prefix>:{<name>}:summary            hash: JSON a worker derives from the learner
    <prefix>:{<name>}:trial:<inc>:<id>   hash: one prediction of incarnation <inc>
    <prefix>:{<name>}:grave:<inc>        sorted set: trial ids of deleted incarnation <inc>
    <prefix>:{<name>}:idem:<key>         hash: what a write with Idempotency-Key <key> did

Trial keys belong to their incarnation, so a trial predicted before a model was deleted
can never be labelled on its successor. Idempotency records outlive a delete (a retried
delete or create finds them) and expire with the label window.

The Lua scripts derive trial keys from the meta key by replacing its ``meta`` suffix
(``base(meta) .. ':trial:' .. incarnation .. ':' .. id``), so the layout above must stay
in step with them.
"""

from __future__ import annotations

import re

__all__ = [
    "IDEMPOTENCY_KEY_PATTERN",
    "NAME_PATTERN",
    "TRIAL_ID_PATTERN",
    "Keys",
    "graves_key",
    "models_key",
    "valid_idempotency_key",
    "valid_name",
    "valid_trial_id",
]

# JSON Schema patterns (``$`` is the end of the text there); Python checks use fullmatch.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
TRIAL_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"
_NAME = re.compile(NAME_PATTERN[1:-1])
_TRIAL_ID = re.compile(TRIAL_ID_PATTERN[1:-1])
_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN[1:-1])


def valid_name(name: object) -> bool:
    """Whether ``name`` is a model name (the whole string: no trailing newline)."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def valid_trial_id(trial_id: object) -> bool:
    return isinstance(trial_id, str) and _TRIAL_ID.fullmatch(trial_id) is not None


def valid_idempotency_key(key: object) -> bool:
    return isinstance(key, str) and _IDEMPOTENCY_KEY.fullmatch(key) is not None


def models_key(prefix: str) -> str:
    return f"{prefix}:models"


def graves_key(prefix: str) -> str:
    return f"{prefix}:graves"


class Keys:
    """The keys of one model."""

    __slots__ = (
        "base",
        "curve",
        "log",
        "meta",
        "models",
        "pending",
        "snapshot",
        "summary",
        "trials",
        "window",
    )

    def __init__(self, prefix: str, name: str) -> None:
        if not valid_name(name):
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
        self.models = models_key(prefix)

    def trial(self, incarnation: str, trial_id: str) -> str:
        return f"{self.base}:trial:{incarnation}:{trial_id}"

    def grave(self, incarnation: str) -> str:
        return f"{self.base}:grave:{incarnation}"

    def idem(self, key: str) -> str:
        return f"{self.base}:idem:{key}"

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
