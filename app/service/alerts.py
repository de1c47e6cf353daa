"""Raising a model's alerts: each once, whichever worker detects it first, never in a
trial's way.

Every worker's drift watch (:mod:`app.service.drift_watch`) detects the same change at the
same log seq as it replays the log, and its bound watch (:mod:`app.service.bound_watch`)
finds the same crossing. A worker looks over the watches of the models it holds
every :data:`POLL` seconds and queues the alerts it has not handed on yet (a bounded
queue; one that is full is tried again at the next look). A background task raises each
in Redis (:class:`storage.alerts.AlertStore`: a record per incarnation, seq and stream,
written once, with a mark on the model's curve); the worker whose write raised it counts
it (``committee_model_alerts_total`` by model, ``committee_alerts_total`` over all),
calls the model's webhook and, with ``rollback``, rolls the model back (on a drift of the
model's own stream only). A model's alert config is
``{"webhook_url": ..., "rollback": false}``; the webhook's host must match one of the
operator's ``alert_allowed_hosts`` (host globs, none by default, read as the fan-out's
``allowed_endpoints``), checked when it is set and again at each call, and redirects are
not followed: a key holder cannot make the service call a host the operator did not allow.
A webhook is POSTed the alert as JSON, retried with a doubling back-off, at most
``alert_webhook_tries`` times, from a bounded queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from prometheus_client import Counter

from app.core.errors import BadInput
from app.core.settings import Settings
from app.core.waiting import until
from app.service import bound_watch
from app.service.drift_watch import NAME, DriftWatch
from app.service.fanout import MAX_URL, allowed
from app.service.replicas import Replicas
from storage.alerts import AlertStore
from storage.errors import ModelNotFound, StorageError
from storage.repository import ModelStore

__all__ = ["ALERTS", "POLL", "RAISED", "WEBHOOKS", "Alerts", "check_config"]

log = logging.getLogger("committee.alerts")
POLL = 0.25  # seconds between looks over the watches of the models a worker holds
HOOKS_AT_ONCE = 4  # webhook calls in flight per worker
_SETTING = "COMMITTEE_ALERT_ALLOWED_HOSTS"

ALERTS = Counter(
    "committee_model_alerts",
    "a model's alerts raised (each counted once, by the worker that raised it)",
    ["model", "stream"],
)
RAISED = Counter(
    "committee_alerts",
    "alerts raised, of every model, by stream: model or expert (drift), or bound (each "
    "counted once)",
    ["stream"],
)
for _stream in ("model", "expert", "bound"):  # exported at 0 from the start, so a rise is seen
    RAISED.labels(_stream)
WEBHOOKS = Counter(
    "committee_alert_webhooks",
    "alert webhook deliveries by outcome: delivered, failed (every try), refused (host "
    "not allowed), dropped (queue full)",
    ["outcome"],
)


def check_config(config: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """An alert config as stored: ``webhook_url`` an http(s) URL whose host matches one of
    ``alert_allowed_hosts``; :class:`BadInput` naming the field otherwise."""
    url = config.get("webhook_url")
    if url is not None:
        field = "webhook_url"
        if not isinstance(url, str) or not 0 < len(url) <= MAX_URL:
            raise BadInput(field, f"expected an http(s) URL of at most {MAX_URL} characters")
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 (a port beyond 65535 is a ValueError)
        except ValueError as e:
            raise BadInput(field, f"{url[:200]!r}: {e}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BadInput(field, f"{url[:200]!r}: expected an http:// or https:// URL with a host")
        if parts.username is not None or parts.password is not None or parts.fragment:
            raise BadInput(field, f"{url[:200]!r}: expected no credentials and no fragment")
        if not allowed(url, settings.alert_allowed_hosts):
            globs = ", ".join(settings.alert_allowed_hosts) or f"none ({_SETTING})"
            raise BadInput(field, f"host {parts.netloc!r} is not an allowed host: allowed {globs}")
    return {"webhook_url": url, "rollback": bool(config.get("rollback", False))}


@dataclass(frozen=True, slots=True)
class _Raise:
    name: str
    incarnation: str
    alert: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Hook:
    url: str
    name: str
    incarnation: str
    alert: dict[str, Any]


def _mark(alert: dict[str, Any]) -> str:
    """An alert in a few words, for the model's curve: "drift model: error 0.10 -> 0.41",
    "bound: 31 mistakes > 30.2 (best expert:svm, 12)"."""
    if alert["kind"] == "bound":
        return (
            f"bound: {alert['mistakes']} mistakes > {alert['bound']:.1f} "
            f"(best {alert['best']}, {alert['best_mistakes']})"
        )
    before, after = alert.get("before"), alert.get("after")
    shown = "?" if before is None else f"{before:.2f}"
    return f"{alert['kind']} {alert['what']}: error {shown} -> {after:.2f}"


class Alerts:
    """The alerts of the models one worker holds (see the module's notes). ``rollback``
    is the service's (:meth:`app.service.model_service.ModelService.rollback`)."""

    def __init__(
        self,
        store: ModelStore,
        replicas: Replicas,
        settings: Settings,
        rollback: Callable[[str, int], Awaitable[int]],
    ) -> None:
        self.records = AlertStore(store)
        self.replicas = replicas
        self.settings = settings
        self.rollback = rollback
        # the alerts handed on, (seq, what), of those the watch keeps, by (model, incarnation)
        self._seen: dict[tuple[str, str], set[tuple[int, str]]] = {}
        self._raising: asyncio.Queue[_Raise] | None = None
        self._hooks: asyncio.Queue[_Hook] | None = None
        self._client: httpx.AsyncClient | None = None

    def start(self) -> None:
        """Start the background work: the look over the watches, the raising, the webhooks
        (each stops when the replicas do)."""
        most = self.settings.alert_queue
        self._raising, self._hooks = asyncio.Queue(most), asyncio.Queue(most)
        self._client = httpx.AsyncClient(
            follow_redirects=False,
            trust_env=False,
            timeout=self.settings.alert_webhook_timeout_ms / 1000,
        )
        self.replicas.spawn(self._watch())
        self.replicas.spawn(self._raise_all(self._raising))
        self.replicas.spawn(self._call_all(self._hooks))

    async def close(self) -> None:
        """Close the webhooks' client, once the replicas' tasks have stopped."""
        if self._client is not None:
            await self._client.aclose()

    # -- configuration ---------------------------------------------------------------

    async def configure(self, name: str, config: dict[str, Any]) -> dict[str, Any]:
        """Set the model's alert config (checked: :func:`check_config`); the config."""
        config = check_config(config, self.settings)
        await self.records.configure(name, config)
        return config

    async def read(self, name: str) -> dict[str, Any]:
        """The model's alerts and what its watch shows, as of its latest version (the
        same on every worker), with its alert config."""
        config = await self.records.config(name)
        m = await self.replicas.fresh(name)
        watch = m.monitors.get(NAME)
        figures = watch.figures() if isinstance(watch, DriftWatch) else {"alerts": []}
        bound = m.monitors.get(bound_watch.NAME)
        shown = bound.figures() if isinstance(bound, bound_watch.BoundWatch) else None
        return {
            "model": name,
            "version": m.version,
            "config": config or None,
            **figures,
            "bound": shown,
        }

    # -- raising -----------------------------------------------------------------------

    async def _watch(self) -> None:
        stop = self.replicas.stopping
        while not stop.is_set():
            self._look()
            await until(stop, POLL)

    def _look(self) -> None:
        """Queue the alerts of the held models' watches not handed on yet."""
        queue = self._raising
        assert queue is not None
        held = self.replicas.held()
        for m in held:
            alerts = [
                alert
                for watch in (m.monitors.get(NAME), m.monitors.get(bound_watch.NAME))
                if isinstance(watch, (DriftWatch, bound_watch.BoundWatch))
                for alert in watch.alerts
            ]
            if not alerts:
                continue
            key = (m.name, m.incarnation)
            seen = self._seen.get(key, set())
            handed = set()
            for alert in alerts:
                at = (alert["seq"], alert["what"])
                if at not in seen:
                    try:
                        queue.put_nowait(_Raise(m.name, m.incarnation, alert))
                    except asyncio.QueueFull:  # the rest at the next look
                        break
                handed.add(at)
            self._seen[key] = handed
        if len(self._seen) > 4 * max(len(held), 1_000):  # models no longer held
            keep = {(m.name, m.incarnation) for m in held}
            self._seen = {k: v for k, v in self._seen.items() if k in keep}

    async def _raise_all(self, queue: asyncio.Queue[_Raise]) -> None:
        stop = self.replicas.stopping
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                item = await asyncio.wait_for(queue.get(), POLL)
                await self._raise(item)

    async def _raise(self, item: _Raise) -> None:
        alert = item.alert
        try:
            config = await self.records.raise_once(
                item.name, item.incarnation, alert["seq"], alert["what"], _mark(alert)
            )
        except ModelNotFound:
            return
        except StorageError as e:  # the next worker to look raises it, or this one reloaded
            log.warning("model %s: raising the alert at %d failed: %s", item.name, alert["seq"], e)
            self._seen.pop((item.name, item.incarnation), None)
            return
        if config is None:  # raised by another worker, or before
            return
        stream = alert["what"] if alert["what"] in ("model", "bound") else "expert"
        ALERTS.labels(item.name, stream).inc()
        RAISED.labels(stream).inc()
        log.warning("model %s: %s alert at log entry %d", item.name, _mark(alert), alert["seq"])
        url = config.get("webhook_url")
        if url:
            assert self._hooks is not None
            try:
                self._hooks.put_nowait(_Hook(url, item.name, item.incarnation, alert))
            except asyncio.QueueFull:
                WEBHOOKS.labels("dropped").inc()
                log.warning("model %s: alert webhook queue full, one dropped", item.name)
        if config.get("rollback") and stream == "model":
            self.replicas.spawn(self._roll_back(item.name, alert))

    async def _roll_back(self, name: str, alert: dict[str, Any]) -> None:
        """Roll the model back to the version before the first trial of the alert's
        recent window (the detector fires within it after the change)."""
        since = alert.get("since") or alert["seq"]
        try:
            seq = await self.rollback(name, max(since - 1, 0))
            log.warning("model %s: rolled back to %d at entry %d (alert)", name, since - 1, seq)
        except (BadInput, StorageError) as e:
            log.warning("model %s: the alert's rollback to %d failed: %s", name, since - 1, e)

    # -- webhooks ----------------------------------------------------------------------

    async def _call_all(self, queue: asyncio.Queue[_Hook]) -> None:
        stop = self.replicas.stopping
        at_once = asyncio.Semaphore(HOOKS_AT_ONCE)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                hook = await asyncio.wait_for(queue.get(), POLL)
                await at_once.acquire()
                self.replicas.spawn(self._call(hook, at_once))

    async def _call(self, hook: _Hook, at_once: asyncio.Semaphore) -> None:
        try:
            WEBHOOKS.labels(await self._deliver(hook)).inc()
        finally:
            at_once.release()

    async def _deliver(self, hook: _Hook) -> str:
        """POST the alert to the hook's URL until a 2xx answer; the outcome."""
        s, client = self.settings, self._client
        assert client is not None
        if not allowed(hook.url, s.alert_allowed_hosts):  # the allow-list may have shrunk
            log.warning("model %s: webhook host no longer allowed: %s", hook.name, hook.url)
            return "refused"
        body = {"model": hook.name, "incarnation": hook.incarnation, "alert": hook.alert}
        headers = {"x-committee-alert": f"{hook.name}/{hook.incarnation}/{hook.alert['seq']}"}
        wait = s.alert_webhook_backoff_ms / 1000
        for attempt in range(s.alert_webhook_tries):
            if attempt:
                await until(self.replicas.stopping, wait)
                wait *= 2
                if self.replicas.stopping.is_set():
                    break
            try:
                r = await client.post(hook.url, json=body, headers=headers)
                if r.is_success:
                    return "delivered"
                why = f"answered {r.status_code}"
            except httpx.HTTPError as e:
                why = f"{type(e).__name__}: {e}"
            log.warning("model %s: webhook try %d: %s", hook.name, attempt + 1, why)
        return "failed"
