"""Jobs: work a worker does in the background for a request (a backtest), kept in Redis
so that any worker can say how far it got.

A job is one hash (:func:`storage.keys.job_key`): ``doc``, the job as a JSON object
written by the worker that runs it, and ``cancel``, set by whoever asks it to stop. The
worker rewrites ``doc`` as it goes, and reads ``cancel`` in the same round trip, and on
its own after each step. The hash
expires ``ttl_ms`` after its last write, so a job whose worker died is read as it last
was (its ``updated`` time says how long ago) and then disappears.
"""

from __future__ import annotations

from typing import Any

import orjson
import redis.asyncio as aioredis

from storage.errors import Conflict, CorruptData, redis_errors
from storage.keys import Keys, job_key, valid_job_id
from storage.scripts import SCRIPTS

__all__ = ["JOB_STATUSES", "MAX_JOB_BYTES", "JobStore"]

JOB_STATUSES = frozenset({"running", "done", "failed", "cancelled"})
MAX_JOB_BYTES = 1 << 20  # a job's document, at most
DEFAULT_TTL_MS = 86_400_000


class JobStore:
    """The jobs under one key prefix."""

    def __init__(self, client: aioredis.Redis, prefix: str, ttl_ms: int = DEFAULT_TTL_MS) -> None:
        self.client = client
        self.prefix = prefix
        self.ttl_ms = ttl_ms
        # run by SHA1, sent whole when Redis does not know it yet
        self._create = client.register_script(SCRIPTS["JOB_CREATE"].text)
        self._cancel = client.register_script(SCRIPTS["JOB_CANCEL"].text)

    async def create(self, doc: dict[str, Any], digest: str = "") -> dict[str, Any] | None:
        """Store a new job (``doc["id"]``, for model ``doc["model"]``) and name it the
        model's latest; None when made, else the job that has that id already (a retry
        of the request that made it, ``digest`` telling them apart).

        Raises :class:`Conflict` when the id is taken by another request.
        """
        key = job_key(self.prefix, doc["id"])
        async with redis_errors():
            got: Any = await self._create([key], [_encoded(doc), digest, self.ttl_ms])
            if got is None:
                latest = Keys(self.prefix, doc["model"]).backtest
                await self.client.set(latest, doc["id"], px=self.ttl_ms)
                return None
        if not isinstance(got, list) or len(got) != 2:
            raise CorruptData(f"job {doc['id']}: the store answered {got!r}")
        if (got[1] or b"") != digest.encode():
            raise Conflict("the Idempotency-Key came before with another request")
        return _decoded(got[0], doc["id"])

    async def find(self, job_id: str, digest: str) -> dict[str, Any] | None:
        """The job made by a request of hash ``digest`` under id ``job_id``; None when
        there is none.

        Raises :class:`Conflict` when another request made it.
        """
        async with redis_errors():
            got: list[Any] = await self.client.hmget(job_key(self.prefix, job_id), "doc", "digest")
        if got[0] is None:
            return None
        if (got[1] or b"") != digest.encode():
            raise Conflict("the Idempotency-Key came before with another request")
        return _decoded(got[0], job_id)

    async def save(self, doc: dict[str, Any]) -> bool:
        """Write the job's document as it is now; whether it was asked to stop."""
        key = job_key(self.prefix, doc["id"])
        raw = _encoded(doc)
        async with redis_errors():
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(key, "doc", raw)
            pipe.pexpire(key, self.ttl_ms)
            pipe.hget(key, "cancel")
            got = await pipe.execute()
        return got[2] == b"1"

    async def stopping(self, job_id: str) -> bool:
        """Whether the job was asked to stop (read between the writes of its document)."""
        async with redis_errors():
            got = await self.client.hget(job_key(self.prefix, job_id), "cancel")
        return got == b"1"

    async def read(self, job_id: str) -> tuple[dict[str, Any], bool] | None:
        """The job and whether it was asked to stop; None when there is no such job."""
        if not valid_job_id(job_id):
            return None
        async with redis_errors():
            got: list[Any] = await self.client.hmget(job_key(self.prefix, job_id), "doc", "cancel")
        if got[0] is None:
            return None
        return _decoded(got[0], job_id), got[1] == b"1"

    async def cancel(self, job_id: str) -> dict[str, Any] | None:
        """Ask the job to stop (its worker stops at its next step); the job as it was,
        None when there is no such job."""
        if not valid_job_id(job_id):
            return None
        async with redis_errors():
            raw = await self._cancel([job_key(self.prefix, job_id)])
        return None if raw is None else _decoded(raw, job_id)

    async def latest(self, name: str) -> str | None:
        """The id of model ``name``'s latest backtest job, while it is kept."""
        async with redis_errors():
            got = await self.client.get(Keys(self.prefix, name).backtest)
        if got is None:
            return None
        job_id = got.decode("ascii", "replace") if isinstance(got, bytes) else ""
        if not valid_job_id(job_id):
            raise CorruptData(f"model {name!r}: its latest job is {got!r}, not a job id")
        return job_id


def _encoded(doc: dict[str, Any]) -> bytes:
    raw = orjson.dumps(doc)
    if len(raw) > MAX_JOB_BYTES:
        raise ValueError(f"a job of {len(raw)} bytes: at most {MAX_JOB_BYTES}")
    return raw


def _decoded(raw: Any, job_id: str) -> dict[str, Any]:
    """A job's document as read back, checked as strictly as input."""
    if not isinstance(raw, bytes) or len(raw) > MAX_JOB_BYTES:
        raise CorruptData(f"job {job_id}: its document is not one the service writes")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise CorruptData(f"job {job_id}: its document is not JSON") from None
    if (
        not isinstance(doc, dict)
        or doc.get("id") != job_id
        or doc.get("status") not in JOB_STATUSES
        or not isinstance(doc.get("model"), str)
    ):
        raise CorruptData(f"job {job_id}: its document lacks its id, model or status")
    return doc
