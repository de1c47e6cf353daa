"""Typed results of the API, as frozen pydantic models.

Fields the service adds later are ignored, so an older client keeps working against a
newer service. ``Label`` is a string or an integer, as the model's labels were given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator

from committee_client.errors import CommitteeError, from_item

__all__ = [
    "Alert",
    "Alerts",
    "ApiKey",
    "AuditEntry",
    "Backtest",
    "BacktestRun",
    "BatchItem",
    "Challenger",
    "Challengers",
    "Contribution",
    "Counters",
    "Explanation",
    "ImportProgress",
    "Instance",
    "Internal",
    "ItemError",
    "Job",
    "Label",
    "LabelExplanation",
    "Labelled",
    "Learned",
    "LearnerKind",
    "LearnerParameter",
    "LearnerStats",
    "LineError",
    "LogImport",
    "LogPage",
    "Model",
    "NewKey",
    "Prediction",
    "State",
    "Stats",
    "Window",
]

Label = StrictStr | StrictInt
MAX_KEPT_ERRORS = 1_000  # the errors of an import's lines kept over its requests
Instance = Mapping[str, Any]
"""``{"features": [...] | {feature: value}, "experts": {expert: vote}}``, either or both."""


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class BacktestRun(_Out):
    """One learner over a backtest's trials: the model itself or a candidate."""

    learner: dict[str, Any]
    trials: int
    mistakes: int
    error_rate: float | None
    late: int = Field(description="labelled predictions judged at replay, not where served")
    curve: list[tuple[int, int]] = Field(description="(version, mistakes since from_version)")
    stopped: dict[str, Any] | None = None


class Backtest(_Out):
    """A backtest's result: the model and each candidate on the same trials."""

    from_version: int
    to_version: int
    trained_from: int
    resets: list[int]
    model: BacktestRun
    candidates: list[BacktestRun]


class Alert(_Out):
    """Where a drift detector over a mistake stream (``what``: ``model`` or a sub-expert)
    found its error rate risen: at log entry ``seq``, the rates ``before`` and ``after``
    (its recent trials, from ``since``)."""

    seq: int
    kind: str
    what: str
    detector: str
    before: float | None
    after: float
    since: int | None
    trials: int


class Alerts(_Out):
    """A model's alerts at its latest version, its watch's figures and its alert config
    (``{"webhook_url", "rollback"}``, None when none is set)."""

    model: str
    version: int
    config: dict[str, Any] | None
    detector: dict[str, Any]
    error_rate: float | None
    experts: dict[str, float | None]
    alerts: list[Alert]


class Challenger(_Out):
    """A shadow challenger and its figures, beside the model's learner's on the same
    trials: ``live_mistakes`` by the predictions served, ``live_log_mistakes`` judged
    as the challenger is; ``curve`` holds ``[trials, mistakes, live_mistakes]``."""

    name: str
    learner: dict[str, Any]
    attached: int
    trials: int
    mistakes: int
    error_rate: float | None
    live_mistakes: int
    live_error_rate: float | None
    live_log_mistakes: int
    skipped: int
    curve: list[list[int]]


class Challengers(_Out):
    """A model's learner and its challengers at its latest version."""

    model: str
    version: int
    learner: dict[str, Any]
    challengers: list[Challenger]

    def __getitem__(self, name: str) -> Challenger:
        for c in self.challengers:
            if c.name == name:
                return c
        raise KeyError(name)


class Job(_Out):
    """A job of the service (a backtest): ``status`` is running, done, failed or
    cancelled; ``result`` is there once it ended."""

    id: str
    kind: str
    model: str
    status: str
    created: int
    updated: int
    seconds: float
    progress: dict[str, int]
    request: dict[str, Any]
    result: Backtest | None = None
    error: str | None = None

    @property
    def running(self) -> bool:
        return self.status == "running"


class Counters(_Out):
    predictions: int
    labelled: int
    learned: int
    mistakes: int
    updates: int
    expired: int
    late_labels: int


class Model(_Out):
    """A model's configuration and counters; ``version`` counts the trials applied."""

    name: str
    labels: list[Label]
    input: dict[str, Any]
    learner: dict[str, Any]
    label_ttl: float
    created: int
    version: int
    folded: int
    counters: Counters

    @field_validator("input")
    @classmethod
    def _given(cls, v: dict[str, Any]) -> dict[str, Any]:
        """The input sections as given (the service also lists absent ones as null)."""
        return {k: x for k, x in v.items() if x is not None}


class LearnerParameter(_Out):
    name: str
    required: bool
    default: Any
    expected: str
    context: bool


class LearnerKind(_Out):
    """A learner the service offers, with its parameters, defaults and allowed values."""

    kind: str
    summary: str
    input: str
    parameters: list[LearnerParameter]


class State(_Out):
    """A learner's full state and the log version it is at."""

    model_version: int
    state: dict[str, Any]


class Contribution(_Out):
    """One input's part of a label's score."""

    input: str
    value: float


class LabelExplanation(_Out):
    """A label's score as ``constant`` + the listed ``contributions`` + ``rest``."""

    constant: float
    contributions: list[Contribution]
    rest: float

    def total(self) -> float:
        """The score these parts add up to."""
        return self.constant + sum(c.value for c in self.contributions) + self.rest


class Explanation(_Out):
    """Each input's part of each label's score, by the learner ``kind`` that predicted."""

    kind: str
    labels: dict[str, LabelExplanation]


class Prediction(_Out):
    """A predicted label; ``trial_id`` (None if untracked) is what to label later.
    ``explanation`` is there when asked for (``explain=True``), else None."""

    trial_id: str | None
    label: Label
    scores: dict[str, float]
    model_version: int
    explanation: Explanation | None = None


class Labelled(_Out):
    """The outcome of a label: was the served prediction a mistake, did the learner change."""

    trial_id: str | None
    predicted: Label
    label: Label
    mistake: bool
    updated: bool


class Learned(_Out):
    """The outcome of a trial learned with its label known."""

    predicted: Label
    label: Label
    mistake: bool
    updated: bool


class ItemError(_Out):
    """Why one item of a batch or stream failed; ``field`` is its path for a 422."""

    status: int
    message: str
    field: str | None = None

    def exception(self) -> CommitteeError:
        """The exception the same error raises for a single call."""
        return from_item(self.model_dump())


T = TypeVar("T", Prediction, Labelled, Learned)


class BatchItem(_Out, Generic[T]):
    """One item's result, or its error (the other items are unaffected)."""

    result: T | None = None
    error: ItemError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def unwrap(self) -> T:
        """The result, or raise the item's error as its exception."""
        if self.error is not None:
            raise self.error.exception()
        if self.result is None:
            raise CommitteeError(None, "the item has neither a result nor an error")
        return self.result


class Window(_Out):
    trials: int
    mistakes: int
    error_rate: float | None


class Internal(_Out):
    """Recycling's own trials: what its learner saw, including recycled ones."""

    trials: int
    mistakes: int
    updates: int


class LearnerStats(_Out):
    name: str
    mistakes: int
    recent_mistakes: int


class Stats(_Out):
    """A model's learning statistics: counters, recent error rate, confusion, curve."""

    name: str
    version: int
    folded: int
    predictions: int
    labelled: int
    learned: int
    pending: int
    expired: int
    late_labels: int
    mistakes: int
    updates: int
    error_rate: float | None
    window: Window
    confusion: dict[str, dict[str, int]]
    curve: list[tuple[int, int]]
    internal: Internal | None = None
    learners: list[LearnerStats] | None = None
    leader: str | None = None
    experts: dict[str, float] | None = None
    summary_version: int


class ApiKey(_Out):
    """An API key as listed: everything but its secret. ``limits`` holds the key's own
    overrides of the service's defaults."""

    id: str
    scope: str
    models: str
    name: str
    created: int
    limits: dict[str, int | float]


class NewKey(ApiKey):
    """A key just made: ``key`` is its secret, shown this once and never in the repr.

    >>> k = NewKey(id="3f9c", scope="read", models="*", name="", created=0, limits={},
    ...            key="cmk_secret")
    >>> k
    NewKey(id='3f9c', scope='read', models='*', name='', created=0, limits={})
    >>> "cmk_secret" in str(k), k.key
    (False, 'cmk_secret')
    """

    # a malformed answer's validation error would otherwise quote the secret
    model_config = ConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True)

    key: str = Field(repr=False)


class AuditEntry(_Out):
    """An admin action or a denied request, as the audit log keeps it."""

    id: str
    at: int
    key_id: str | None
    key_name: str
    action: str
    model: str | None
    status: int
    detail: str


class LogPage(_Out):
    """A page of a model's log (``GET /v1/models/{name}/log``): its entries as the NDJSON
    lines served (without their newlines), the version of the last one (``next_from``,
    the next page's start), and the model's version when read; more entries follow while
    ``next_from < version``. ``entries()`` decodes the lines."""

    lines: list[bytes]
    next_from: int
    version: int

    def entries(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines]


class LineError(_Out):
    """A line of an import the model refused: its number, and why."""

    line: int
    status: int
    message: str
    field: str | None = None


class LogImport(_Out):
    """What an import did: of its ``lines`` (from ``first_line``, blank ones included),
    those appended now, those an earlier run appended already, and those refused (each
    in ``errors``, the first 1,000 of them kept over several requests)."""

    import_id: str
    first_line: int
    lines: int
    applied: int
    already: int
    failed: int
    errors: list[LineError]
    next_line: int
    model_version: int

    def then(self, more: LogImport) -> LogImport:
        """This and the request after it, as one."""
        return self.model_copy(
            update={
                "lines": self.lines + more.lines,
                "applied": self.applied + more.applied,
                "already": self.already + more.already,
                "failed": self.failed + more.failed,
                "errors": [*self.errors, *more.errors][:MAX_KEPT_ERRORS],
                "next_line": more.next_line,
                "model_version": more.model_version,
            }
        )


class ImportProgress(_Out):
    """Where an import resumes (``GET .../log/imports/{import_id}``)."""

    import_id: str
    next_line: int
    block: int
