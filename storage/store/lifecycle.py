"""Models as a whole: create, read, list and delete them, and the sweep that finishes
what crashes left (see :mod:`storage.scripts` for how the registry agrees with the
models)."""

from __future__ import annotations

import contextlib
import secrets
from typing import Any

import orjson

from storage.errors import Conflict, Full, ModelNotFound, StorageError, redis_errors
from storage.keys import LEGACY_GRAVES, LEGACY_MODELS, grave_parts, valid_name, valid_trial_id
from storage.store.calls import REUSED, Calls, now_ms
from storage.store.records import Created, Idempotency, StoredModel, as_int, parse_meta, text

__all__ = ["GRAVE_BATCH", "SETTLE_AFTER_MS", "Lifecycle"]

GRAVE_BATCH = 1_000  # trial keys a delete or a sweep removes in one step
# a create or delete takes less than this from its first step to its last: a registry
# entry unsettled for longer was left by a crash, and the sweep settles it
SETTLE_AFTER_MS = 60_000


class Lifecycle:
    """The models of one key prefix: their registry entries and their keys."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    async def create(
        self,
        name: str,
        config: dict[str, Any],
        *,
        n_classes: int,
        size: int,
        most: int,
        idem: Idempotency | None = None,
        keep_ms: int = 86_400_000,
    ) -> Created:
        """Store a new model: list it in the registry, make its keys, settle the entry.

        :class:`Conflict` if the name is taken (or ``idem`` came with another request),
        :class:`Full` if ``most`` models exist already."""
        c = self.calls
        k, r = c.keys(name), c.registry
        incarnation = secrets.token_hex(8)
        reply = await c.run(
            "REGISTER", name, [r.models, r.unsettled], [name, incarnation, most, now_ms()]
        )
        if reply[0] == b"full":
            raise Full("max_stored_models", most, f"{most} models exist: delete one first")
        keys = [*k.all_fixed(), k.idem(idem.key) if idem else k.meta]
        args = [incarnation, orjson.dumps(config), n_classes, size]
        args += [idem.digest if idem else "", keep_ms]
        try:
            reply = await c.run("CREATE", name, keys, args)
        finally:
            # whatever happened, the entry names the incarnation that exists: ours if
            # the create took, the one already there, or none
            with contextlib.suppress(StorageError):
                await self._settle(name, incarnation)
        status = reply[0]
        if status == b"exists":
            raise Conflict(f"model {name!r} already exists")
        if status == b"mismatch":
            raise Conflict(REUSED)
        if status == b"repeat":
            return Created(as_int(reply[1], "created"), text(reply[2]), True)
        return Created(as_int(reply[1], "created"), incarnation, False)

    async def _settle(self, name: str, listed: str) -> bool:
        """Make the registry entry of ``name``, if it still holds ``listed``, name the
        incarnation the model has (none: no entry); False if it changed meanwhile."""
        c = self.calls
        async with redis_errors():
            has = text(await c.client.hget(c.keys(name).meta, "incarnation") or b"")
        r = c.registry
        reply = await c.run("SETTLE", name, [r.models, r.unsettled], [name, listed, has])
        return reply[0] == b"ok"

    async def _settle_quietly(self, name: str, listed: str) -> None:
        # a failure leaves the entry unsettled, for the sweep
        with contextlib.suppress(StorageError):
            await self._settle(name, listed)

    async def delete(
        self, name: str, *, idem: Idempotency | None = None, keep_ms: int = 86_400_000
    ) -> None:
        """Delete a model and every key it has in one atomic step (trial keys of a model
        with many go to a grave that :meth:`sweep` empties), then its registry entry;
        :class:`ModelNotFound` if there is none."""
        c = self.calls
        k, r = c.keys(name), c.registry
        fixed = [*k.all_fixed(), k.idem(idem.key) if idem else k.meta]
        if idem is not None:  # a retry of a delete that was done touches nothing
            async with redis_errors():
                op, digest = await c.client.hmget(k.idem(idem.key), ["op", "h"])
            if op is not None:
                if (op, digest) == (b"delete", idem.digest.encode()):
                    return
                raise Conflict(REUSED)
        await c.run("UNSETTLE", name, [r.models, r.unsettled], [name, now_ms()])
        for _ in range(5):  # the model may be deleted and created again meanwhile
            async with redis_errors():
                inc = text(await c.client.hget(k.meta, "incarnation") or b"")
            grave = k.grave(inc)
            if inc:  # listed first: a crash after the delete leaves it to the sweep
                async with redis_errors():
                    await c.client.zadd(r.graves, {grave: now_ms()})
            # the trial keys, when few, are deleted in the same step (declared to it)
            async with redis_errors():
                ids = [text(t) for t in await c.client.zrange(k.trials, 0, GRAVE_BATCH)]
            if len(ids) > GRAVE_BATCH:
                ids = []
            args = [idem.digest if idem else "", keep_ms, inc, *ids]
            trials = [k.trial(inc, t) for t in ids if valid_trial_id(t)]
            if len(trials) < len(ids):  # not the service's ids: the sweep deals with them
                args, trials = args[:3], []
            try:
                reply = await c.run("DELETE", name, [*fixed, grave, *trials], args)
            except ModelNotFound:
                await self._settle_quietly(name, inc)
                raise
            if reply[0] == b"mismatch":
                raise Conflict(REUSED)
            if reply[0] == b"moved":
                continue
            if reply[0] == b"repeat":
                # done meanwhile by the first request under this key, still in flight
                # when this retry read no record: the grave listed above may be of a model
                # made since, and stays listed until that one is deleted (unlisting it
                # here could unlist one a delete of that model under way needs)
                await self._settle_quietly(name, inc)
                return
            if reply[0] == b"ok":
                await self._settle_quietly(name, inc)
                if reply[1] in (0, b"0"):  # nothing went to the grave
                    async with redis_errors():
                        await c.client.zrem(r.graves, grave)
            return
        raise Conflict(f"model {name!r} kept being created again: delete it again")

    async def sweep(self, budget: int = 100) -> int:
        """Delete the trial keys of deleted models, at most ``budget`` batches, and
        settle the registry entries a crash left unsettled; returns how many graves are
        left."""
        c = self.calls
        r = c.registry
        old = now_ms() - SETTLE_AFTER_MS
        async with redis_errors():
            stale = await c.client.zrangebyscore(r.unsettled, "-inf", old, 0, 100)
        for member in stale:
            name = text(member)
            async with redis_errors():
                listed = text(await c.client.hget(r.models, name) or b"")
            if not valid_name(name):
                await c.run("SETTLE", "", [r.models, r.unsettled], [name, listed, ""])
                continue
            await self._settle(name, listed)
        async with redis_errors():
            graves = [text(g) for g in await c.client.zrange(r.graves, 0, 99)]
        for key in graves:
            parts = grave_parts(key)
            if parts is not None:
                meta, trials, inc = parts
                async with redis_errors():
                    if await c.client.hget(meta, "incarnation") == inc.encode():
                        continue  # its delete has not run yet (or never will)
                left = 1
                while left and budget > 0:
                    budget -= 1
                    async with redis_errors():
                        ids = [text(t) for t in await c.client.zrange(key, 0, GRAVE_BATCH - 1)]
                    hashes = [trials + t for t in ids]
                    reply = await c.run("SWEEP", "", [key, *hashes], ids)
                    left = as_int(reply[1], "trials left")
                if left:
                    break
            async with redis_errors():
                await c.client.zrem(r.graves, key)
        async with redis_errors():
            return int(await c.client.zcard(r.graves))

    async def adopt_legacy(self) -> None:
        """Move the single-node layout's sets of model names and graves into the
        registry (each step repeatable, for workers starting together)."""
        c = self.calls
        r = c.registry
        models = LEGACY_MODELS.format(prefix=c.prefix)
        graves = LEGACY_GRAVES.format(prefix=c.prefix)
        async with redis_errors():
            names = await c.client.smembers(models)
        for member in names:
            name = text(member)
            if not valid_name(name):
                continue
            async with redis_errors():
                inc = await c.client.hget(c.keys(name).meta, "incarnation")
                if inc:
                    await c.client.hsetnx(r.models, name, inc)
        async with redis_errors():
            for grave in await c.client.smembers(graves):
                await c.client.zadd(r.graves, {text(grave): 0}, nx=True)
            await c.client.delete(models)
            await c.client.delete(graves)

    async def names(self) -> list[str]:
        """The registry's names: every model, and perhaps some being created or deleted
        (reading one of those finds no model)."""
        async with redis_errors():
            members = await self.calls.client.hkeys(self.calls.registry.models)
        return sorted(n for n in map(text, members) if valid_name(n))

    async def read(self, name: str) -> StoredModel:
        """The model's config and counters (without its learner state)."""
        async with redis_errors():
            raw = await self.calls.client.hgetall(self.calls.keys(name).meta)
        if not raw:
            raise ModelNotFound(name)
        return parse_meta(name, raw)
