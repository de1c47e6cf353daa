"""A Python client for the Committee service: blocking (:class:`Client`) and asyncio
(:class:`AsyncClient`), typed results, one exception per failure, safe retries.

>>> from committee_client import Client, Retry
>>> c = Client("http://127.0.0.1:8000", timeout=5, retry=Retry(attempts=4))
>>> c.retry.attempts
4
>>> c.close()

Retries are safe by design: a tracked ``predict`` always carries a trial id (made up by
the client when not given) so a repeat returns the stored prediction, and a repeated
identical ``label`` returns the same answer. ``learn`` is not idempotent on the service
and is retried only when the request certainly did not reach it.
"""

from committee_client._async import AsyncClient
from committee_client._retry import Retry
from committee_client._stream import AsyncStream
from committee_client._sync import Client
from committee_client._sync_stream import Stream
from committee_client.errors import (
    CommitteeError,
    Conflict,
    ConnectionFailed,
    InvalidInput,
    NotFound,
    ServerError,
    TooLarge,
    Unavailable,
)
from committee_client.types import (
    BatchItem,
    Counters,
    Instance,
    Internal,
    ItemError,
    Label,
    Labelled,
    Learned,
    LearnerKind,
    LearnerParameter,
    LearnerStats,
    Model,
    Prediction,
    State,
    Stats,
    Window,
)

__all__ = [
    "AsyncClient",
    "AsyncStream",
    "BatchItem",
    "Client",
    "CommitteeError",
    "Conflict",
    "ConnectionFailed",
    "Counters",
    "Instance",
    "Internal",
    "InvalidInput",
    "ItemError",
    "Label",
    "Labelled",
    "Learned",
    "LearnerKind",
    "LearnerParameter",
    "LearnerStats",
    "Model",
    "NotFound",
    "Prediction",
    "Retry",
    "ServerError",
    "State",
    "Stats",
    "Stream",
    "TooLarge",
    "Unavailable",
    "Window",
]
