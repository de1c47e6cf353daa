"""The consumer: messages from a source applied as trial calls, answered, acknowledged.

It reads up to ``consume_batch`` messages at a time and applies each batch while it
reads the next, holding at most ``consume_max_in_flight`` read and not yet
acknowledged. A batch's messages of one model are applied in their order, consecutive
ones of the same op as one batch call (one script call, as the gathered calls of the
HTTP service are); the batch's models go at once.

Then the batch is settled at its source (:class:`Settlement`): each answer (a
prediction, a judged label or learn, or the error the REST call would have answered) is
published to the reply stream, each malformed message to the dead-letter stream with its
reason, and only then are they acknowledged. A message whose call found Redis
unavailable is not acknowledged: it is tried again. A process killed at any point
leaves its unacknowledged messages to be delivered again, and the calls give a
redelivered message the first answer (see :mod:`app.service.consume.messages`); a
message delivered more than ``consume_max_deliveries`` times (one that fails whoever
takes it, or stops the process that does) is dead-lettered instead of tried again.

The consumer acts with the scopes and tenancy of its API key (:class:`KeyAccess`): a
message for a model outside the key's models is dead-lettered, not applied; the key's
trial rate holds the consumer back; a revoked key stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, Protocol

import orjson

from app.core.errors import BadInput
from app.core.settings import Settings
from app.service.access import Auth, Principal
from app.service.consume.messages import Call, Delivery, ReadTrials, read, read_learns
from app.service.model_service import ModelService
from storage.auth import ApiKey
from storage.errors import RateLimited, StorageError, Unavailable

__all__ = [
    "AccessRefused",
    "Consumer",
    "Describe",
    "KeyAccess",
    "Settlement",
    "Source",
]

log = logging.getLogger("committee.consume")
RETRY_SECONDS = 1.0  # after Redis or the broker failed: the wait before reading again
KEYS_WAIT = 10.0  # seconds the consumer waits for the key table on start
# an error as answered: {"status", "message", "field"} (app.http.error_status.item_error)
Describe = Callable[[Exception], dict[str, Any]]


class AccessRefused(Exception):
    """The consumer's API key is missing, unknown, revoked, or not a write key."""


@dataclass(slots=True)
class Settlement:
    """What becomes of a batch's messages: ``answers`` (with the JSON published for each)
    and ``dead`` (with the reason) are published, then acknowledged; ``again`` are not
    acknowledged, to be delivered again."""

    answers: list[tuple[Delivery, bytes]] = field(default_factory=list)
    dead: list[tuple[Delivery, str]] = field(default_factory=list)
    again: list[Delivery] = field(default_factory=list)


class Source(Protocol):
    """A broker's stream, read by a consumer group (Redis) or a durable consumer (NATS)."""

    name: str

    async def open(self) -> None:
        """Connect, and make the group or the consumer if it is missing."""

    async def fetch(self, most: int) -> list[Delivery]:
        """Up to ``most`` messages: redeliveries of unacknowledged ones first; waits a
        second at most when there are none (then an empty list)."""
        ...

    async def settle(self, s: Settlement) -> None:
        """Publish the answers and the dead letters, then acknowledge them."""

    async def close(self) -> None: ...


class KeyAccess:
    """What the consumer may do: an API key's, resolved as the HTTP guard resolves one
    (:mod:`app.service.access`), or everything while auth is off (no key ever made)."""

    def __init__(self, auth: Auth, secret: str | None) -> None:
        self.auth = auth
        self.secret = secret
        self.key: ApiKey | None = None
        self.principal = Principal(None)

    async def start(self) -> None:
        """Read the key table and find the key; :class:`AccessRefused` when auth is on
        and the key is missing, unknown or not a write key. A refused start stops the
        key table's watch it began: nothing of it is left running."""
        await self.auth.start()
        try:
            await self._find_key()
        except BaseException:
            await self.auth.close()
            raise

    async def _find_key(self) -> None:
        ring = self.auth.keyring
        async with asyncio.timeout(KEYS_WAIT):
            while not ring.ready:
                await asyncio.sleep(0.05)
        if not ring.on:
            if self.secret:
                log.warning("auth is off (no API key was ever made): the key is not needed")
            return
        if not self.secret:
            raise AccessRefused("auth is on: give the consumer a write key (--api-key)")
        key = await ring.find(self.secret)
        if key is None:
            raise AccessRefused("the API key is not valid (unknown or revoked)")
        principal = Principal(key)
        if not principal.may("write"):
            raise AccessRefused(f"the API key's scope is {key.scope}: a consumer needs write")
        self.key, self.principal = key, principal
        log.info("consuming as key %s (%s), models %r", key.id, key.name, key.models)

    def check(self) -> None:
        """:class:`AccessRefused` once the key has been revoked."""
        if self.key is not None and not self.auth.keyring.current(self.key):
            raise AccessRefused(f"the API key {self.key.id} was revoked")

    def refusal(self, model: str) -> str:
        """Why the key may not touch ``model`` ('' when it may)."""
        if self.principal.sees(model):
            return ""
        assert self.key is not None
        return f"model: {model!r} is outside the API key's models ({self.key.models!r})"

    async def admit(self, n: int) -> None:
        """Spend ``n`` of the key's trial rate, waiting while it lacks them."""
        if self.key is None or n == 0:
            return
        most = self.auth.limiter.most(self.key, "trials")
        while n > 0:
            take = min(n, most)
            try:
                await self.auth.limiter.admit(self.key, "trials", take)
            except RateLimited as e:
                await asyncio.sleep(max(0.01, min(e.retry_after, 1.0)))
                continue
            n -= take

    async def close(self) -> None:
        await self.auth.close()


class Consumer:
    """Apply ``source``'s messages to ``service``'s models with ``access``'s rights;
    ``describe`` writes an error as the REST calls answer it, and ``read_trials`` (the
    HTTP bodies' compiled reader) reads the learns' bodies together where it can."""

    def __init__(
        self,
        service: ModelService,
        source: Source,
        access: KeyAccess,
        describe: Describe,
        settings: Settings,
        read_trials: ReadTrials | None = None,
    ) -> None:
        if settings.consume_batch > settings.consume_max_in_flight:
            raise ValueError(
                f"consume_batch {settings.consume_batch} exceeds consume_max_in_flight "
                f"{settings.consume_max_in_flight}: a batch must fit in flight"
            )
        self.service = service
        self.source = source
        self.access = access
        self.describe = describe
        self.settings = settings
        self.read_trials = read_trials
        self.in_flight = 0  # messages read and not yet settled
        self.settled = 0  # messages settled, answered or dead-lettered
        self.failure: BaseException | None = None  # what stopped the consumer
        self._space = asyncio.Condition()

    async def run(self, stop: asyncio.Event) -> None:
        """Read, apply and settle until ``stop`` is set (the batches in flight then
        finish) or the key is revoked (:class:`AccessRefused`)."""
        s = self.settings
        tasks: set[asyncio.Task[None]] = set()
        try:
            while not stop.is_set() and self.failure is None:
                async with self._space:
                    await self._space.wait_for(
                        lambda: (
                            self.in_flight + 1 <= s.consume_max_in_flight
                            or self.failure is not None
                        )
                    )
                if self.failure is not None:
                    break
                self.access.check()
                room = min(s.consume_batch, s.consume_max_in_flight - self.in_flight)
                try:
                    batch = await self.source.fetch(room)
                except (StorageError, OSError, ConnectionError, TimeoutError) as e:
                    log.warning(
                        "reading %s failed (again in %g s): %s", self.source.name, RETRY_SECONDS, e
                    )
                    await asyncio.sleep(RETRY_SECONDS)
                    continue
                if not batch:
                    continue
                self.in_flight += len(batch)
                task = asyncio.ensure_future(self._handle(batch))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        finally:
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
        if self.failure is not None:
            raise self.failure

    async def _handle(self, batch: list[Delivery]) -> None:
        try:
            s = await self.apply(batch)
            try:
                await self.source.settle(s)
            except Exception as e:  # delivered again: their calls answer as before
                log.warning(
                    "settling %d messages at %s failed: %s", len(batch), self.source.name, e
                )
            if s.again:
                await asyncio.sleep(RETRY_SECONDS)
            self.settled += len(s.answers) + len(s.dead)
        except AccessRefused as e:
            self.failure = e
        except Exception as e:
            log.exception("a batch of %d messages failed", len(batch))
            self.failure = e
        finally:
            self.in_flight -= len(batch)
            async with self._space:
                self._space.notify_all()

    async def apply(self, batch: Sequence[Delivery]) -> Settlement:
        """Read, check and apply ``batch``: what becomes of each message."""
        out = Settlement()
        calls: list[Call] = []
        refusals: dict[str, str] = {}  # by model, once per batch
        for d, call in zip(batch, self._read(batch), strict=True):
            if isinstance(call, str):
                out.dead.append((d, call))
                continue
            refusal = refusals.get(call.model)
            if refusal is None:
                refusal = refusals[call.model] = self.access.refusal(call.model)
            if refusal:
                out.dead.append((d, refusal))
            else:
                calls.append(call)
        self.access.check()
        await self.access.admit(len(calls))
        by_model: dict[str, list[Call]] = {}
        for c in calls:
            by_model.setdefault(c.model, []).append(c)
        done = await asyncio.gather(*(self._apply_model(cs) for cs in by_model.values()))
        for answered in done:
            for c, result in answered:
                if result is None:
                    out.again.append(c.delivery)
                elif isinstance(result, BadInput):
                    out.dead.append((c.delivery, _reason(result)))
                else:
                    out.answers.append((c.delivery, self._answer(c, result)))
        return out

    def _read(self, batch: Sequence[Delivery]) -> list[Call | str]:
        """Each message's call, or why it is dead-lettered. The learns are read together
        in one compiled pass where they all plainly are learns, as a batch's items are."""
        most = self.settings.consume_max_deliveries
        out: list[Call | str] = []
        learns: list[int] = []  # the places of the learns, read together below
        for i, d in enumerate(batch):
            if d.deliveries > most:  # failed every time so far: not tried again
                why = f"delivered {d.deliveries} times: at most {most} (consume_max_deliveries)"
                out.append(f"deliveries: {why}")
                continue
            if d.op == "learn" and self.read_trials is not None:
                learns.append(i)
                out.append("")
                continue
            out.append(self._read_one(d))
        if learns:
            assert self.read_trials is not None
            ds = [batch[i] for i in learns]
            got: Sequence[Call | str] | None = read_learns(ds, self.settings, self.read_trials)
            for i, call in zip(learns, got or [self._read_one(d) for d in ds], strict=True):
                out[i] = call
        return out

    def _read_one(self, d: Delivery) -> Call | str:
        try:
            return read(d, self.settings)
        except BadInput as e:
            return _reason(e)

    async def _apply_model(
        self, calls: list[Call]
    ) -> list[tuple[Call, dict[str, Any] | Exception | None]]:
        """One model's calls in order, consecutive ones of an op together; None for a
        call to deliver again."""
        out: list[tuple[Call, dict[str, Any] | Exception | None]] = []
        for (op, track), run in groupby(calls, key=lambda c: (c.op, c.track)):
            group = list(run)
            try:
                results = await self._call(group[0].model, op, track, group)
            except Unavailable as e:  # not acknowledged: delivered again
                log.warning("model %s: %s (its %d messages again)", group[0].model, e, len(group))
                out += [(c, None) for c in group]
                continue
            except Exception as e:  # answered to each, as the REST call would be
                if not isinstance(e, BadInput | StorageError):
                    log.exception("model %s: %s", group[0].model, e)
                results = [e] * len(group)
            # an item the service could not answer yet (Redis away, or a repeat whose
            # first answer is not known here yet) is not acknowledged: delivered again
            out += [
                (c, None if isinstance(r, Unavailable) else r)
                for c, r in zip(group, results, strict=True)
            ]
        return out

    async def _call(
        self, name: str, op: str, track: bool, group: list[Call]
    ) -> Sequence[dict[str, Any] | Exception]:
        trials = self.service.trials
        if op == "predict":
            return await trials.predict(name, [c.args for c in group], track=track)
        if op == "label":
            return await trials.label(name, [c.args for c in group])
        # each answer is published before its message is acknowledged, and a redelivery
        # reads it from the outcome folded into its record: not kept besides
        requests = [(c.idem, [c.args]) for c in group]
        outs = await trials.learn_groups(name, requests, keep=False)
        return [out[0] for out in outs]

    def _answer(self, c: Call, result: dict[str, Any] | Exception) -> bytes:
        d = c.delivery
        doc: dict[str, Any] = {"id": d.id, "model": c.model, "op": c.op}
        if isinstance(result, Exception):
            doc["error"] = self.describe(result)
        else:
            doc["result"] = result
        return orjson.dumps(doc)


def _reason(e: BadInput) -> str:
    return f"{e.field}: {e.message}"


async def run_consumer(consumer: Consumer, stop: asyncio.Event) -> None:
    """Open the consumer's source and key, run it until ``stop``, close them."""
    await consumer.access.start()
    try:
        await consumer.source.open()
        try:
            await consumer.run(stop)
        finally:
            with contextlib.suppress(Exception):
                await consumer.source.close()
    finally:
        await consumer.access.close()
