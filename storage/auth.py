"""API keys, their rate-limit buckets, the models each key owns, and the audit log, in Redis.

A key's secret is never stored: only its SHA-256 digest, beside the key's id, scope,
tenancy glob, name and limits. Every change bumps a version counter that each worker polls
(:class:`app.service.access.Keyring`), so a new or revoked key is seen on every worker and host at
once. The key records, the version, the ownership of models and the audit stream share the
hash tag ``{auth}`` (one slot in a Redis Cluster); each key's rate buckets have their own.
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
from storage.errors import REDIS_DOWN, CorruptData, StorageError, Unavailable, refused
from storage.keys import AuthKeys
from storage.resp import ReplyError

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


# KEYS: 1 the key's bucket hash. ARGV: 1 bucket name, 2 rate (tokens/s), 3 capacity,
# 4 tokens wanted, 5 tokens needed at least. Reply: {granted, left, wait ms} (as strings:
# Lua numbers would be truncated). Redis's clock, so every worker and host agrees on it.
TAKE = """
local rate, cap = tonumber(ARGV[2]), tonumber(ARGV[3])
local want, need = tonumber(ARGV[4]), tonumber(ARGV[5])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n_field, at_field = ARGV[1] .. ':n', ARGV[1] .. ':at'
local got = redis.call('HMGET', KEYS[1], n_field, at_field)
local tokens, at = tonumber(got[1]), tonumber(got[2])
if tokens == nil or at == nil then tokens, at = cap, now end
tokens = math.min(cap, tokens + math.max(0, now - at) * rate / 1000)
if tokens < need then
  redis.call('HSET', KEYS[1], n_field, tostring(tokens), at_field, tostring(now))
  redis.call('PEXPIRE', KEYS[1], math.ceil(cap / rate * 1000) + 1000)
  return {'0', tostring(tokens), tostring((need - tokens) * 1000 / rate)}
end
local grant = math.min(want, math.floor(tokens))
tokens = tokens - grant
redis.call('HSET', KEYS[1], n_field, tostring(tokens), at_field, tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(cap / rate * 1000) + 1000)
return {tostring(grant), tostring(tokens), '0'}
"""
_TAKE_SHA = hashlib.sha1(TAKE.encode()).hexdigest()

# KEYS: 1 owners hash (model -> key id), 2 the key's owned set. ARGV: 1 model, 2 key id,
# 3 most models. Reply: 'new' | 'owned' | 'full'. A model already owned (by anyone) is not
# counted again: a retried create reserves nothing new.
RESERVE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 'owned' end
if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[3]) then return 'full' end
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 'new'
"""


# The key table's steps, each one script on the slot of ``{auth}`` (a Redis Cluster has
# no MULTI across nodes, and these keys share one slot).
# KEYS: 1 version, 2 table. Reply: {version or '', table as a flat field/value list}.
LOAD = """
return {redis.call('GET', KEYS[1]) or '', redis.call('HGETALL', KEYS[2])}
"""
# KEYS: 1 version, 2 table. ARGV: 1 key id, 2 record. Reply: the new version.
PUT = """
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return redis.call('INCR', KEYS[1])
"""
# KEYS: 1 version, 2 table. ARGV: 1 key id. Reply: 1 if it was there, else 0.
REVOKE = """
local n = redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('INCR', KEYS[1])
return n
"""
# KEYS: 1 owners hash, 2 the owner's owned set. ARGV: 1 model, 2 owner id. Reply: 1 if
# released, 0 if the model had another owner (or none) by then.
RELEASE = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('SREM', KEYS[2], ARGV[1])
return 1
"""
_SHAS = {text: hashlib.sha1(text.encode()).hexdigest() for text in (LOAD, PUT, REVOKE, RELEASE)}
_SHAS[RESERVE] = hashlib.sha1(RESERVE.encode()).hexdigest()


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
        raw_version, flat = await self._script(LOAD, [self.keys.version, self.keys.table], [])
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
        await self._script(PUT, [self.keys.version, self.keys.table], [key.id, key.encode()])
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

    async def revoke(self, key_id: str) -> bool:
        """Remove a key; False if there was none with this id."""
        removed = await self._script(REVOKE, [self.keys.version, self.keys.table], [key_id])
        await self._call(self.client.delete(self.keys.bucket(key_id)))
        return bool(removed)

    # -- rate buckets -----------------------------------------------------------------

    async def take(
        self, key_id: str, bucket: str, rate: float, capacity: float, want: int, need: int
    ) -> Taken:
        """Take between ``need`` and ``want`` tokens from a key's bucket, in one atomic
        step; none if fewer than ``need`` are there."""
        cmd = (_TAKE_SHA, TAKE, [self.keys.bucket(key_id)], [bucket, rate, capacity, want, need])
        try:
            reply = await self.conn.evalsha(*cmd)
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
        reply = _text(await self._script(RESERVE, keys, [model, key_id, most]))
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
        await self._script(RELEASE, keys, [model, owner_id])

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
        ``audit_max`` are trimmed)."""
        fields = {
            "at": int(time.time() * 1000),
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
            at, status = f.get("at", ""), f.get("status", "")
            if not (at.isdigit() and status.isdigit()):
                continue  # not an entry this service wrote
            out.append(
                AuditEntry(
                    _text(entry_id),
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

    async def _script(self, text: str, keys: list[str], args: list[Any]) -> Any:
        try:
            return await self.conn.evalsha(_SHAS[text], text, keys, args)
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
