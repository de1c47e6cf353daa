"""API keys, their rate-limit buckets, the models each key owns, and the audit log, in Redis.

A key's secret is never stored: only its SHA-256 digest, beside the key's id, scope,
tenancy glob, name and limits. Every change bumps a version counter that each worker polls
(:class:`app.service.access.Keyring`), so a new or revoked key is seen on every worker and host at
once. The key records, the version, the ownership of models and the audit stream share the
hash tag ``{auth}`` (one slot in a Redis Cluster); each key's rate buckets have their own.
Every step that reads and writes at once is one Lua script of ``storage/lua/auth``
(:data:`storage.scripts.AUTH_SCRIPTS`), its KEYS and ARGV named at the top of its file.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis import exceptions as rex

from storage.client import Clients
from storage.errors import (
    REDIS_DOWN,
    Conflict,
    CorruptData,
    StorageError,
    Unavailable,
    refused,
)
from storage.keys import AuthKeys
from storage.resp import ReplyError
from storage.scripts import AUTH_SCRIPTS

__all__ = [
    "KEY_ID_PATTERN",
    "SCOPES",
    "ApiKey",
    "AuditEntry",
    "AuthStore",
    "Taken",
    "digest",
    "new_secret",
]

SCOPES = ("read", "write", "admin")
KEY_ID_PATTERN = r"^[a-z0-9-]{1,32}$"
SECRET_PREFIX = "cmk_"
BOOTSTRAP_ID = "bootstrap"
LIMIT_FIELDS = ("requests_per_second", "trials_per_second", "burst", "max_models")


def new_secret() -> str:
    """A new key: 256 random bits, URL-safe, marked so a leaked one is recognisable."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def digest(secret: str) -> str:
    """What is stored of a key: its SHA-256 (keys have 256 bits of entropy, so a fast hash
    is as good as a slow one)."""
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A key as stored: everything but its secret."""

    id: str
    digest: str
    scope: str
    models: str
    name: str
    created: int
    limits: dict[str, float] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        """The key as the API shows it (no digest)."""
        return {
            "id": self.id,
            "scope": self.scope,
            "models": self.models,
            "name": self.name,
            "created": self.created,
            "limits": dict(self.limits),
        }

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "digest": self.digest,
                "scope": self.scope,
                "models": self.models,
                "name": self.name,
                "created": self.created,
                "limits": self.limits,
            }
        )

    @classmethod
    def decode(cls, key_id: str, raw: bytes) -> ApiKey:
        """A stored record, checked like any input."""
        try:
            doc = orjson.loads(raw)
            limits = doc.get("limits") or {}
            ok = (
                isinstance(doc, dict)
                and doc.get("scope") in SCOPES
                and all(isinstance(doc.get(f), str) for f in ("digest", "models", "name"))
                and isinstance(doc.get("created"), int)
                and isinstance(limits, dict)
                and all(
                    k in LIMIT_FIELDS and isinstance(v, int | float) and v > 0
                    for k, v in limits.items()
                )
            )
        except (orjson.JSONDecodeError, AttributeError):
            ok = False
        if not ok:
            raise CorruptData(f"API key {key_id!r}: not a key record")
        return cls(
            key_id, doc["digest"], doc["scope"], doc["models"], doc["name"], doc["created"], limits
        )


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: str
    at: int
    key_id: str | None
    key_name: str
    action: str
    model: str | None
    status: int
    detail: str

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "key_id": self.key_id,
            "key_name": self.key_name,
            "action": self.action,
            "model": self.model,
            "status": self.status,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class Taken:
    """What a rate bucket gave: ``granted`` tokens (0: refused), the tokens left, and the
    milliseconds until the tokens asked for are there (when refused)."""

    granted: int
    left: float
    wait_ms: float


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class AuthStore:
    """The keys, buckets, ownership and audit log under one key prefix."""

    def __init__(self, clients: Clients, prefix: str, audit_max: int = 100_000) -> None:
        self.client: aioredis.Redis = clients.redis
        self.conn = clients.scripts
        self.keys = AuthKeys(prefix)
        self.audit_max = audit_max

    # -- keys ---------------------------------------------------------------------------

    async def version(self) -> int:
        """The version of the key table: it changes whenever a key is made or revoked."""
        raw = await self._call(self.client.get(self.keys.version))
        if raw is None:
            return 0
        if not raw.isdigit():
            raise CorruptData(f"{self.keys.version}: not a counter")
        return int(raw)

    async def load(self) -> tuple[int, list[ApiKey]]:
        """The version and every key, read in one step."""
        raw_version, flat = await self._script("LOAD", [self.keys.version, self.keys.table], [])
        version = int(raw_version) if raw_version and raw_version.isdigit() else 0
        out = []
        for raw_id, raw in zip(flat[::2], flat[1::2], strict=True):
            try:
                out.append(ApiKey.decode(_text(raw_id), raw))
            except CorruptData:
                continue  # a record this service did not write: never a key
        return version, sorted(out, key=lambda k: (k.created, k.id))

    async def create(
        self,
        scope: str,
        models: str = "*",
        name: str = "",
        limits: dict[str, float] | None = None,
        *,
        secret: str | None = None,
        key_id: str | None = None,
    ) -> tuple[ApiKey, str]:
        """Store a new key; returns it and its secret (which nothing keeps)."""
        if scope not in SCOPES:
            raise ValueError(f"scope {scope!r}: expected one of {', '.join(SCOPES)}")
        secret = secret or new_secret()
        key = ApiKey(
            key_id or secrets.token_hex(6),
            digest(secret),
            scope,
            models,
            name,
            int(time.time()),
            dict(limits or {}),
        )
        await self._script("PUT", [self.keys.version, self.keys.table], [key.id, key.encode()])
        return key, secret

    async def bootstrap(self, secret: str) -> ApiKey:
        """The admin key ``secret`` (``COMMITTEE_ADMIN_KEY``), stored under the id
        ``bootstrap`` unless it is there already with the same secret."""
        raw = await self._call(self.client.hget(self.keys.table, BOOTSTRAP_ID))
        if raw is not None:
            with_id = ApiKey.decode(BOOTSTRAP_ID, raw)
            if secrets.compare_digest(with_id.digest, digest(secret)):
                return with_id
        key, _ = await self.create(
            "admin", "*", "bootstrap (COMMITTEE_ADMIN_KEY)", secret=secret, key_id=BOOTSTRAP_ID
        )
        return key

    async def revoke(self, key_id: str, by: str | None = None) -> bool:
        """Remove a key; False if there was none with this id. Raises
        :class:`~storage.errors.Conflict` for the key ``by`` (the one asking: a key never
        revokes itself) and for the last admin key on every model (``"*"``), the one key
        left that can make others."""
        if by is not None and by == key_id:
            raise Conflict(
                f"key {key_id!r} is the key making this request: a key cannot revoke "
                "itself (revoke it with another admin key)"
            )
        keys = [self.keys.version, self.keys.table]
        reply = _text(await self._script("REVOKE", keys, [key_id]))
        if reply == "last admin":
            raise Conflict(
                f"key {key_id!r} is the last admin key on every model ('*'): make another "
                "admin key first, or nobody could manage the keys"
            )
        if reply not in ("revoked", "none"):
            raise CorruptData(f"revoking key {key_id!r}: unreadable reply")
        if reply == "revoked":
            await self._call(self.client.delete(self.keys.bucket(key_id)))
        return reply == "revoked"

    # -- rate buckets -----------------------------------------------------------------

    async def take(
        self, key_id: str, bucket: str, rate: float, capacity: float, want: int, need: int
    ) -> Taken:
        """Take between ``need`` and ``want`` tokens from a key's bucket, in one atomic
        step; none if fewer than ``need`` are there."""
        s = AUTH_SCRIPTS["TAKE"]
        keys, args = [self.keys.bucket(key_id)], [bucket, rate, capacity, want, need]
        try:
            reply = await self.conn.evalsha(s.sha, s.text, keys, args)
            granted, left, wait = (float(_text(v)) for v in reply)
        except ReplyError as e:
            raise StorageError(f"Redis refused a command: {e}") from e
        except (TypeError, ValueError):
            raise CorruptData(f"rate bucket of key {key_id!r}: unreadable reply") from None
        return Taken(int(granted), left, wait)

    # -- models owned by keys ---------------------------------------------------------

    async def reserve(self, model: str, key_id: str, most: int) -> str:
        """Count ``model`` against the key's quota: ``"new"``, ``"owned"`` (by some key
        already, so not counted again) or ``"full"`` (the key owns ``most``)."""
        keys = [self.keys.owners, self.keys.owned(key_id)]
        reply = _text(await self._script("RESERVE", keys, [model, key_id, most]))
        if reply not in ("new", "owned", "full"):
            raise CorruptData(f"reserving model {model!r}: unreadable reply")
        return reply

    async def release(self, model: str) -> None:
        """The model is gone: its owner may make another."""
        owner = await self._call(self.client.hget(self.keys.owners, model))
        if owner is None:
            return
        owner_id = _text(owner)
        keys = [self.keys.owners, self.keys.owned(owner_id)]
        await self._script("RELEASE", keys, [model, owner_id])

    # -- audit --------------------------------------------------------------------------

    async def audit(
        self,
        key_id: str | None,
        key_name: str,
        action: str,
        model: str | None,
        status: int,
        detail: str = "",
    ) -> None:
        """Append an entry to the audit stream (its oldest entries beyond
        ``audit_max`` are trimmed). Its time is the entry id's, given by Redis as it
        appends, so the stream's order and the entries' times agree whichever worker
        wrote them."""
        fields = {
            "key_id": key_id or "",
            "key_name": key_name[:200],
            "action": action[:200],
            "model": model or "",
            "status": status,
            "detail": detail[:500],
        }
        await self._call(
            self.client.xadd(
                self.keys.audit,
                fields,  # type: ignore[arg-type]
                maxlen=self.audit_max,
                approximate=True,
            )
        )

    async def read_audit(self, limit: int = 100, before: str | None = None) -> list[AuditEntry]:
        """The newest ``limit`` entries (older than the entry id ``before``), newest first."""
        top = f"({before}" if before else "+"
        raw = await self._call(self.client.xrevrange(self.keys.audit, top, "-", count=limit))
        out = []
        for entry_id, fields in raw:
            f = {_text(k): _text(v) for k, v in fields.items()}
            ident, status = _text(entry_id), f.get("status", "")
            at = ident.partition("-")[0]
            if not (at.isdigit() and status.isdigit()):
                continue  # not an entry this service wrote
            out.append(
                AuditEntry(
                    ident,
                    int(at),
                    f.get("key_id") or None,
                    f.get("key_name", ""),
                    f.get("action", ""),
                    f.get("model") or None,
                    int(status),
                    f.get("detail", ""),
                )
            )
        return out

    async def _script(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run the script ``name`` of :data:`AUTH_SCRIPTS` (EVALSHA; EVAL when Redis
        does not know it yet)."""
        s = AUTH_SCRIPTS[name]
        try:
            return await self.conn.evalsha(s.sha, s.text, keys, args)
        except ReplyError as e:
            raise refused(e) from e

    @staticmethod
    async def _call(awaitable: Any) -> Any:
        try:
            return await awaitable
        except REDIS_DOWN as e:
            raise Unavailable(f"Redis is unavailable: {e}") from e
        except rex.ResponseError as e:
            raise refused(e) from e


def ceil_seconds(ms: float) -> int:
    """Whole seconds to wait (at least 1), for ``Retry-After``."""
    return max(1, math.ceil(ms / 1000))
