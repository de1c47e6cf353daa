"""A Python client for the Committee service: blocking (:class:`Client`) and asyncio
(:class:`AsyncClient`), typed results, one exception per failure, safe retries.

>>> from committee_client import Client, Retry
>>> c = Client("http://127.0.0.1:8000", timeout=5, retry=Retry(attempts=4), api_key="cmk_x")
>>> c.retry.attempts, c.headers["Authorization"]
(4, 'Bearer cmk_x')
>>> c.close()

``api_key`` (else the ``COMMITTEE_API_KEY`` variable) is sent with every request and
stream; the service asks for one once any key exists. A 401 raises :class:`Unauthorized`,
a 403 :class:`Forbidden`, and a 429 (a rate limit or quota) :class:`RateLimited`, an
:class:`Unavailable` retried like a 503 after its ``Retry-After``.

Retries are safe by design: a tracked ``predict`` always carries a trial id (made up by
the client when not given) so a repeat returns the stored prediction, a repeated
identical ``label`` returns the same answer, and ``learn`` and the other writes carry an
``Idempotency-Key``, so the service answers a retry with its first answer.
"""

from committee_client._async import AsyncClient
from committee_client._events import Event
from committee_client._retry import Retry
from committee_client._stream import AsyncStream
from committee_client._sync import Client
from committee_client._sync_stream import Stream
from committee_client.errors import (
    CommitteeError,
    Conflict,
    ConnectionFailed,
    Forbidden,
    InvalidInput,
    NotFound,
    RateLimited,
    ServerError,
    TooLarge,
    Unauthorized,
    Unavailable,
)
from committee_client.types import (
    Alert,
    Alerts,
    ApiKey,
    AuditEntry,
    Backtest,
    BacktestRun,
    BatchItem,
    Challenger,
    Challengers,
    Contribution,
    Counters,
    Explanation,
    ImportProgress,
    Instance,
    Internal,
    ItemError,
    Job,
    Label,
    LabelExplanation,
    Labelled,
    Learned,
    LearnerKind,
    LearnerParameter,
    LearnerStats,
    LineError,
    LogImport,
    LogPage,
    Model,
    NewKey,
    Prediction,
    State,
    Stats,
    Window,
)

__all__ = [
    "Alert",
    "Alerts",
    "ApiKey",
    "AsyncClient",
    "AsyncStream",
    "AuditEntry",
    "Backtest",
    "BacktestRun",
    "BatchItem",
    "Challenger",
    "Challengers",
    "Client",
    "CommitteeError",
    "Conflict",
    "ConnectionFailed",
    "Contribution",
    "Counters",
    "Event",
    "Explanation",
    "Forbidden",
    "ImportProgress",
    "Instance",
    "Internal",
    "InvalidInput",
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
    "NotFound",
    "Prediction",
    "RateLimited",
    "Retry",
    "ServerError",
    "State",
    "Stats",
    "Stream",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "Window",
]
