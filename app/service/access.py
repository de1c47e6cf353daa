"""Who may do what: API keys, scopes, tenancy and rate limits, for every worker.

Auth is on as soon as a key has been made (:mod:`storage.auth` holds them), and stays
on when every key is revoked. Each worker keeps
the key table in memory (:class:`Keyring`), re-read whenever its version in Redis moves,
which a worker checks every :data:`REFRESH` seconds: a revoked key stops working on every
worker within a second, and a key presented before this worker has seen it is looked up
at once.

Rate limits are token buckets in Redis, one step per take, so they hold across workers and
hosts. A worker takes a small lease of tokens at a time (:data:`LEASE_SECONDS` of the
rate) and spends it locally, so a busy key costs a Redis call per lease rather than per
request; leased tokens unspent after :data:`LEASE_TTL` lapse, so they never exceed the
bucket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from app.core.errors import BadInput
from app.core.settings import Settings
from app.core.waiting import until
from storage.auth import ApiKey, AuthStore, ceil_seconds, digest
from storage.errors import RateLimited, StorageError

__all__ = [
    "OPEN",
    "Auth",
    "Keyring",
    "Limiter",
    "Principal",
    "principal_of",
]

log = logging.getLogger("committee.auth")
REFRESH = 0.25  # seconds between looks at the key table's version
MISS_RELOAD = 0.05  # seconds: an unknown key re-reads the table at most this often
LEASE_SECONDS = 0.005  # a lease holds this many seconds of a key's rate
LEASE_TTL = 1.0  # seconds a leased token may wait to be spent
DENIED_PER_SECOND = 100  # denied requests one worker audits a second; the rest are counted
RANK = {"read": 0, "write": 1, "admin": 2}
MAX_SECRET = 256


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request comes from: a key, or nobody while auth is off (everything open)."""

    key: ApiKey | None

    @property
    def confined(self) -> bool:
        return self.key is not None and self.key.models != "*"

    def sees(self, model: str) -> bool:
        """Whether the model is within this key's tenancy."""
        return self.key is None or fnmatchcase(model, self.key.models)

    def may(self, scope: str) -> bool:
        return self.key is None or RANK[self.key.scope] >= RANK[scope]

    def who(self) -> tuple[str | None, str]:
        """Key id and name, for the audit log."""
        if self.key is None:
            return None, ""
        return self.key.id, self.key.name


OPEN = Principal(None)


def principal_of(scope: MutableMapping[str, Any]) -> Principal:
    """The principal the guard (:mod:`app.http.guard`) found for a request."""
    p: Principal = scope.get("committee.principal", OPEN)
    return p


class Keyring:
    """This worker's copy of the key table."""

    def __init__(self, store: AuthStore) -> None:
        self.store = store
        self.version = -1  # -1: never loaded; requests wait for the first load
        self.by_digest: dict[str, ApiKey] = {}
        self.by_id: dict[str, ApiKey] = {}
        self.loaded_at = 0.0
        self._loading: asyncio.Future[None] | None = None

    @property
    def ready(self) -> bool:
        return self.version >= 0

    @property
    def on(self) -> bool:
        """Whether auth is on: once a key has been made it stays on, even when every key
        is revoked (a service is never opened by revoking its last key)."""
        return self.version > 0

    async def reload(self) -> None:
        """Read the table again (callers at the same time share one read)."""
        if self._loading is None:
            self._loading = asyncio.ensure_future(self._load())
            self._loading.add_done_callback(self._loaded)
        await asyncio.shield(self._loading)

    def _loaded(self, f: asyncio.Future[None]) -> None:
        self._loading = None
        if not f.cancelled():
            f.exception()  # retrieved: each caller sees it from its await

    async def _load(self) -> None:
        version, keys = await self.store.load()
        self.by_id = {k.id: k for k in keys}
        self.by_digest = {k.digest: k for k in keys}
        self.version = version
        self.loaded_at = time.monotonic()

    async def watch(self, stop: asyncio.Event) -> None:
        """Re-read the table whenever its version moves, until ``stop`` is set (a Redis
        outage is logged once, when it starts, and once when it ends): between reads,
        never in the middle of one (see :mod:`app.core.waiting`)."""
        failing = False
        while not stop.is_set():
            try:
                if not self.ready or await self.store.version() != self.version:
                    await self.reload()
                if failing:
                    log.warning("reading the API keys works again")
                failing = False
            except StorageError as e:
                if not failing:
                    log.warning("reading the API keys failed (keeping the last ones): %s", e)
                failing = True
            await until(stop, REFRESH)

    async def find(self, secret: str) -> ApiKey | None:
        """The key whose secret this is, or None."""
        if len(secret) > MAX_SECRET:
            return None
        d = digest(secret)
        key = self.by_digest.get(d)
        if key is None and time.monotonic() - self.loaded_at >= MISS_RELOAD:
            await self.reload()  # made a moment ago on another worker, perhaps
            key = self.by_digest.get(d)
        return key

    def current(self, key: ApiKey) -> bool:
        """Whether ``key`` is still valid (not revoked)."""
        now = self.by_id.get(key.id)
        return now is not None and now.digest == key.digest


@dataclass(frozen=True, slots=True)
class Limits:
    """A key's limits: its scope's defaults, overridden by the key's own."""

    requests: float
    trials: float
    burst: float
    max_models: int


class Limiter:
    """The rate limits of every key, taken from Redis a lease at a time."""

    def __init__(self, store: AuthStore, settings: Settings) -> None:
        self.store = store
        s = settings
        self.defaults = {
            "read": (s.read_requests_per_second, 0.0),
            "write": (s.write_requests_per_second, s.write_trials_per_second),
            "admin": (s.admin_requests_per_second, s.admin_trials_per_second),
        }
        self.burst = s.rate_burst
        self.max_models_default = s.max_models_per_key
        # (key id, bucket) -> [tokens leased and not spent, when they lapse]
        self.leases: dict[tuple[str, str], list[float]] = {}

    def limits(self, key: ApiKey) -> Limits:
        requests, trials = self.defaults[key.scope]
        own = key.limits
        return Limits(
            float(own.get("requests_per_second", requests)),
            float(own.get("trials_per_second", trials)),
            float(own.get("burst", self.burst)),
            int(own.get("max_models", self.max_models_default)),
        )

    def bucket(self, key: ApiKey, bucket: str) -> tuple[float, float]:
        """The rate (per second) and capacity of one of the key's buckets."""
        lim = self.limits(key)
        rate = lim.requests if bucket == "requests" else lim.trials
        return rate, max(1.0, rate * lim.burst)

    def most(self, key: ApiKey, bucket: str) -> int:
        """The most of ``bucket`` one take may ask: what the key's bucket holds."""
        return int(self.bucket(key, bucket)[1])

    async def admit(self, key: ApiKey, bucket: str, n: int = 1) -> None:
        """Spend ``n`` of the key's ``bucket`` (``requests`` or ``trials``); raises
        :class:`~storage.errors.RateLimited` when the bucket lacks them."""
        lease = self.leases.get((key.id, bucket))
        now = time.monotonic()
        if lease is not None and lease[0] >= n and now < lease[1]:
            lease[0] -= n
            return
        rate, capacity = self.bucket(key, bucket)
        if n > capacity:
            raise BadInput("items", f"{n} at once: this key's {bucket} burst is {capacity:g}")
        want = max(n, int(rate * LEASE_SECONDS))
        taken = await self.store.take(key.id, bucket, rate, capacity, want, n)
        if taken.granted < n:
            raise RateLimited(
                f"{bucket}_per_second", rate, capacity, taken.left, ceil_seconds(taken.wait_ms)
            )
        left = lease[0] if lease is not None and now < lease[1] else 0.0
        if len(self.leases) > 100_000:
            self.leases.clear()
        self.leases[(key.id, bucket)] = [left + taken.granted - n, now + LEASE_TTL]


Admit = Callable[[int], Awaitable[None]]


class Auth:
    """The keys, the limits and the audit log of one worker."""

    def __init__(self, store: AuthStore, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.keyring = Keyring(store)
        self.limiter = Limiter(store, settings)
        self._watch: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._denied = (0, 0)  # (second, entries written in it)
        self.denied_unlogged = 0  # denied requests beyond DENIED_PER_SECOND, not yet noted

    async def start(self) -> None:
        """Store the bootstrap admin key if one is configured, then watch the key table.

        Until both are done the keyring is not ready and guarded requests get a 503:
        auth fails closed."""
        with contextlib.suppress(StorageError):
            await self._bootstrap()
            await self.keyring.reload()
        self._watch = asyncio.ensure_future(self._run())

    async def _bootstrap(self) -> None:
        if self.settings.admin_key:
            await self.store.bootstrap(self.settings.admin_key)

    async def _run(self) -> None:
        while not self.keyring.ready and not self._stop.is_set():
            try:
                await self._bootstrap()
                await self.keyring.reload()
            except StorageError as e:
                log.warning("reading the API keys failed: %s", e)
                await until(self._stop, REFRESH)
        await self.keyring.watch(self._stop)

    async def close(self) -> None:
        """Stop watching the key table: asked, not cancelled (see :meth:`Keyring.watch`);
        the read in flight, if any, is let finish."""
        self._stop.set()
        if self._watch is not None:
            await self._watch

    async def revoke(self, principal: Principal, key_id: str) -> bool:
        """Revoke the key ``key_id`` for ``principal`` (False: no such key), then read
        the table again so this worker refuses it at once. Never the principal's own key,
        nor the last admin key on every model: :class:`~storage.errors.Conflict` (409)."""
        revoked = await self.store.revoke(key_id, by=principal.who()[0])
        if revoked:
            await self.keyring.reload()
        return revoked

    def admit_trials(self, key: ApiKey) -> Admit:
        """What a trial call runs with its item count before applying them."""

        async def admit(n: int) -> None:
            await self.limiter.admit(key, "trials", n)

        return admit

    async def audit(
        self,
        principal: Principal,
        action: str,
        model: str | None,
        status: int,
        detail: str = "",
    ) -> None:
        """Record an admin action or a denied request; a failure is logged, not raised."""
        if action.startswith("denied "):  # a flood of them must not flood Redis
            second = int(time.monotonic())
            written = self._denied[1] if self._denied[0] == second else 0
            if written >= DENIED_PER_SECOND:
                self.denied_unlogged += 1
                return
            self._denied = (second, written + 1)
            if self.denied_unlogged:
                detail = f"{detail} ({self.denied_unlogged} denied requests before not logged)"
                self.denied_unlogged = 0
        key_id, name = principal.who()
        if key_id is None:
            name = "(no valid key)" if self.keyring.on else "(auth off)"
        try:
            await self.store.audit(key_id, name, action, model, status, detail)
        except StorageError as e:
            log.warning("audit entry %r not written: %s", action, e)
