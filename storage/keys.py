"""Every Redis key name the service uses, built in this one module, and the one check of
the names and ids that go into them.

A model's keys share the hash tag ``{name}``, so in a Redis Cluster they live in one slot
and one Lua script may touch them all. The registry of models shares the tag
``{registry}``: no step touches both a model's keys and the registry, so every step is
single-slot (see ``storage/lua/create.lua``, ``delete.lua`` and ``settle.lua`` for how the
two stay in agreement)::

    <prefix>:{registry}:models           hash: model name -> its incarnation
    <prefix>:{registry}:unsettled        sorted set: name -> when a create or delete of it
                                         began (ms), until the registry agrees with it
    <prefix>:{registry}:graves           sorted set: grave key -> when it was listed (ms)
    <prefix>:{<name>}:meta               hash: config, incarnation, version, counters
    <prefix>:{<name>}:log                stream: applied trials, entry id "<seq>-0"
    <prefix>:{<name>}:snapshot           hash: version, state (the learner at that version)
    <prefix>:{<name>}:trials             sorted set: kept trial id -> its label deadline
                                         (ms) while pending, minus its purge time after
    <prefix>:{<name>}:curve              list: "<trial>:<mistakes>" points, down-sampled
    <prefix>:{<name>}:window             list: the same every 10 trials, the last 1,000 trials
    <prefix>:{<name>}:summary            hash: JSON a worker derives from the learner
    <prefix>:{<name>}:trial:<inc>:<id>   string: one prediction of incarnation <inc> (a
                                         header, then its instance and scores until labelled),
                                         expiring with its purge time
    <prefix>:{<name>}:grave:<inc>        sorted set: trial ids of deleted incarnation <inc>
    <prefix>:{<name>}:idem:<key>         hash: what a write with Idempotency-Key <key> did
    <prefix>:{<name>}:alerts             hash: the alerts raised and the alert config of
                                         incarnation 'inc' (storage.alerts)

A backtest's job (:mod:`storage.jobs`) has a slot of its own; a model names its latest
one in its slot::

    <prefix>:{job:<id>}                  hash: doc (the job as JSON), cancel ("1": asked to stop)
    <prefix>:{<name>}:backtest           string: the id of the model's latest backtest job

API keys (:mod:`storage.auth`) share the hash tag ``{auth}``; each key's rate buckets
have their own::

    <prefix>:{auth}:keys                 hash: key id -> record (digest, scope, models, ...)
    <prefix>:{auth}:version              counter: bumped by every key made or revoked
    <prefix>:{auth}:owners               hash: model name -> id of the key that made it
    <prefix>:{auth}:owned:<id>           set: the models key <id> made (its quota)
    <prefix>:{auth}:audit                stream: admin actions and denied requests
    <prefix>:{rate:<id>}                 hash: key <id>'s token buckets

Trial keys belong to their incarnation, so a trial predicted before a model was deleted
can never be labelled on its successor. Idempotency records outlive a delete (a retried
delete or create finds them) and expire with the label window.

The Lua scripts build no key names: every key they touch is passed in their ``KEYS``,
built here (the trial hashes and records of the outcomes a script folds, the trial hashes
of a grave it sweeps included), so a Redis Cluster routes each call by its declared keys,
also while their slot is being moved.
"""

from __future__ import annotations

import re

__all__ = [
    "IDEMPOTENCY_KEY_PATTERN",
    "JOB_ID_PATTERN",
    "LEGACY_GRAVES",
    "LEGACY_MODELS",
    "NAME_PATTERN",
    "TRIAL_ID_PATTERN",
    "AuthKeys",
    "Keys",
    "Registry",
    "grave_parts",
    "job_key",
    "valid_idempotency_key",
    "valid_job_id",
    "valid_name",
    "valid_trial_id",
]

# JSON Schema patterns (``$`` is the end of the text there); Python checks use fullmatch.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
TRIAL_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"
JOB_ID_PATTERN = r"^[0-9a-f]{32}$"
_NAME = re.compile(NAME_PATTERN[1:-1])
_TRIAL_ID = re.compile(TRIAL_ID_PATTERN[1:-1])
_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN[1:-1])
_JOB_ID = re.compile(JOB_ID_PATTERN[1:-1])


def valid_name(name: object) -> bool:
    """Whether ``name`` is a model name (the whole string: no trailing newline)."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def valid_trial_id(trial_id: object) -> bool:
    return isinstance(trial_id, str) and _TRIAL_ID.fullmatch(trial_id) is not None


def valid_idempotency_key(key: object) -> bool:
    return isinstance(key, str) and _IDEMPOTENCY_KEY.fullmatch(key) is not None


def valid_job_id(job_id: object) -> bool:
    return isinstance(job_id, str) and _JOB_ID.fullmatch(job_id) is not None


def job_key(prefix: str, job_id: str) -> str:
    """The hash of job ``job_id`` (checked: see :data:`JOB_ID_PATTERN`)."""
    if not valid_job_id(job_id):
        raise ValueError(f"job id {job_id!r} does not match {JOB_ID_PATTERN}")
    return f"{prefix}:{{job:{job_id}}}"


# the single-node layout's sets of model names and of graves, moved into the registry
LEGACY_MODELS = "{prefix}:models"
LEGACY_GRAVES = "{prefix}:graves"


class Registry:
    """The keys listing every model and every grave (one slot: the tag ``{registry}``)."""

    __slots__ = ("graves", "models", "unsettled")

    def __init__(self, prefix: str) -> None:
        base = f"{prefix}:{{registry}}"
        self.models = f"{base}:models"
        self.unsettled = f"{base}:unsettled"
        self.graves = f"{base}:graves"


def _trial_prefix(base: str, incarnation: str) -> str:
    return f"{base}:trial:{incarnation}:"


def _grave(base: str, incarnation: str) -> str:
    return f"{base}:grave:{incarnation}"


_GRAVE = re.compile(r"(.*):grave:([0-9A-Fa-f]+)")


def grave_parts(grave: str) -> tuple[str, str, str] | None:
    """Of a grave (:meth:`Keys.grave`): its model's meta key, the prefix of the trial keys
    it lists and its incarnation; None if ``grave`` is not a grave's key."""
    m = _GRAVE.fullmatch(grave)
    return None if m is None else (f"{m[1]}:meta", _trial_prefix(m[1], m[2]), m[2])


class Keys:
    """The keys of one model."""

    __slots__ = (
        "alerts",
        "backtest",
        "base",
        "curve",
        "idem_prefix",
        "log",
        "meta",
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
        self.idem_prefix = f"{self.base}:idem:"
        self.backtest = f"{self.base}:backtest"
        self.alerts = f"{self.base}:alerts"

    def trial_prefix(self, incarnation: str) -> str:
        """The prefix of the trial keys of ``incarnation``: a trial id completes one."""
        return _trial_prefix(self.base, incarnation)

    def trial(self, incarnation: str, trial_id: str) -> str:
        return self.trial_prefix(incarnation) + trial_id

    def grave(self, incarnation: str) -> str:
        return _grave(self.base, incarnation)

    def idem(self, key: str) -> str:
        return self.idem_prefix + key

    def all_fixed(self) -> list[str]:
        """The model's own keys, in the order of the scripts' ``KEYS[1..8]`` (see
        :mod:`storage.scripts`)."""
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

    def folded(self, incarnation: str, fold_ids: list[str]) -> list[str]:
        """The keys the outcomes being folded name, in order (see :mod:`storage.scripts`):
        a trial hash of ``incarnation``, or an idempotency record for an id ``!<key>``;
        ids that are empty name none."""
        return [
            self.idem(i[1:]) if i[0] == "!" else self.trial(incarnation, i) for i in fold_ids if i
        ]


class AuthKeys:
    """The keys of the API keys' records (see :mod:`storage.auth`)."""

    __slots__ = ("audit", "base", "owners", "prefix", "table", "version")

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.base = f"{prefix}:{{auth}}"
        self.table = f"{self.base}:keys"
        self.version = f"{self.base}:version"
        self.owners = f"{self.base}:owners"
        self.audit = f"{self.base}:audit"

    def owned(self, key_id: str) -> str:
        return f"{self.base}:owned:{key_id}"

    def bucket(self, key_id: str) -> str:
        return f"{self.prefix}:{{rate:{key_id}}}"
