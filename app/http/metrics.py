"""Prometheus metrics: request latencies of this process and every model's counters.

Model counters are read from Redis when scraped, so every worker reports the same, true
values. Request histograms are per process; with several workers `committee serve` sets
``PROMETHEUS_MULTIPROC_DIR`` and they are summed over the workers.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.service.alerts import ALERTS, RAISED, WEBHOOKS
from app.service.fanout import BREAKER_STATE, EXPERT_OUTCOMES, EXPERT_SECONDS
from app.service.scorecards import WINDOW
from storage.repository import Statistics

__all__ = ["CONTENT_TYPE", "WORKER", "RequestMetrics", "render"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: this worker process's name for its answers (``X-Committee-Worker``), random per process:
#: which worker answered, for an operator following a request (and for the tests)
WORKER = ""
_WORKER_HEADER = (b"x-committee-worker", b"")


def _name_this_process() -> None:
    global WORKER, _WORKER_HEADER
    WORKER = secrets.token_hex(4)
    _WORKER_HEADER = (b"x-committee-worker", WORKER.encode())


_name_this_process()
os.register_at_fork(after_in_child=_name_this_process)  # a forked worker is another

REQUESTS = Histogram(
    "committee_request_duration_seconds",
    "HTTP request latency by route, method and status",
    ["method", "route", "status"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
)

_COUNTERS = {
    "version": "trials applied (the model log's length)",
    "predictions": "tracked predictions made",
    "labelled": "labels applied",
    "learned": "trials learned with a known label",
    "mistakes": "mistakes among folded trials",
    "updates": "trials on which the learner changed",
    "expired": "predictions whose label deadline passed",
    "late_labels": "labels refused after the deadline",
    "quarantined": "log entries no worker could replay, skipped",
    "refused": "trials whose update the learner refused whole",
}


class RequestMetrics:
    """ASGI middleware timing every HTTP request by its route template, and naming the
    worker that answered in ``X-Committee-Worker``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def tracked(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), _WORKER_HEADER]
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            REQUESTS.labels(scope["method"], path, str(status)).observe(time.perf_counter() - start)


class _Models:
    """A collector over statistics read just before the scrape."""

    def __init__(self, stats: Iterable[Statistics]) -> None:
        self.stats = list(stats)

    def collect(self) -> Iterable[Metric]:
        families = {
            name: CounterMetricFamily(f"committee_model_{name}", doc, labels=["model"])
            for name, doc in _COUNTERS.items()
        }
        pending = GaugeMetricFamily(
            "committee_model_pending", "predictions waiting for a label", labels=["model"]
        )
        for s in self.stats:
            m = s.model
            values = {**m.counters, "version": m.version}
            values["expired"] += s.overdue
            for name, family in families.items():
                family.add_metric([m.name], values[name])
            pending.add_metric([m.name], s.pending)
        yield from families.values()
        yield pending
        yield from _scorecards(self.stats)


_SCORECARD_COUNTERS = {
    "trials": "trials a fusion model's classifier voted in",
    "mistakes": "trials whose label was not the classifier's top vote",
}
_SCORECARD_GAUGES = {
    "error_rate": "the classifier's mistakes / trials",
    "recent_error_rate": f"the classifier's error rate over its last {WINDOW:,} trials",
    "agreement": "the share of its trials whose served prediction was its top vote",
    "weight": "its own sub-experts' weight in the model's learner",
}


def _scorecards(stats: Iterable[Statistics]) -> Iterable[Metric]:
    """Each fusion model's classifiers' scorecards, as its summary holds them (at most
    MAX_EXPERTS a model: the label sets stay bounded)."""
    labels = ["model", "expert"]
    counters = {
        k: CounterMetricFamily(f"committee_expert_{k}", doc, labels=labels)
        for k, doc in _SCORECARD_COUNTERS.items()
    }
    gauges = {
        k: GaugeMetricFamily(f"committee_expert_{k}", doc, labels=labels)
        for k, doc in _SCORECARD_GAUGES.items()
    }
    for s in stats:
        for card in (s.summary or {}).get("scorecards") or ():
            at = [s.model.name, card["expert"]]
            for k, counter in counters.items():
                counter.add_metric(at, card[k])
            values = {**card, "recent_error_rate": card["recent"]["error_rate"]}
            for k, gauge in gauges.items():
                if values[k] is not None:  # no trials yet, or no weights: no sample
                    gauge.add_metric(at, values[k])
    yield from counters.values()
    yield from gauges.values()


def render(stats: Iterable[Statistics]) -> bytes:
    """The exposition text: this process's (or all workers') requests and the models."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)
    else:
        registry.register(_Process())
    registry.register(_Models(stats))
    return generate_latest(registry)


class _Process:
    """This process's request histogram, its calls to experts' endpoints and the alerts
    it raised (single-process mode)."""

    def collect(self) -> Iterable[Metric]:
        yield from REQUESTS.collect()
        for metric in (EXPERT_OUTCOMES, EXPERT_SECONDS, BREAKER_STATE, ALERTS, RAISED, WEBHOOKS):
            yield from metric.collect()
