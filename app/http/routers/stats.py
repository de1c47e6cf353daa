"""Statistics for dashboards: cheap to poll, no learner state loaded."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Response

from app.http.deps import NameParam, ServiceDep
from app.http.permissions import READ, access
from app.http.routers.common import answer, check_name
from app.http.schemas import EndpointsPublic, StatsPublic
from app.service.model_service import ModelService
from storage.repository import Statistics

router = APIRouter(prefix="/v1/models/{name}", tags=["statistics"])


def _rate(mistakes: int, trials: int) -> float | None:
    return mistakes / trials if trials > 0 else None


def public(s: Statistics) -> dict[str, Any]:
    """The :class:`StatsPublic` document of ``s`` (built directly: dashboards poll it)."""
    m = s.model
    # the labels it has now: those added live after it was made included (labels are
    # only ever added, so a count's index names the same label ever after)
    labels = [str(v) for v in m.current.get("labels", [])]

    def label(c: int) -> str:
        return labels[c] if 0 <= c < len(labels) else str(c)

    confusion: dict[str, dict[str, int]] = {}
    judged = 0  # trials folded with a verdict: not changes of the input, nor quarantined
    for (y, p), n in sorted(m.confusion.items()):
        confusion.setdefault(label(y), {})[label(p)] = n
        judged += n
    trials, mistakes = s.window
    summary: dict[str, Any] = s.summary or {}
    c = m.counters
    return dict(
        name=m.name,
        version=m.version,
        folded=m.folded,
        predictions=c["predictions"],
        labelled=c["labelled"],
        learned=c["learned"],
        pending=s.pending,
        expired=c["expired"] + s.overdue,
        late_labels=c["late_labels"],
        quarantined=c["quarantined"],
        refused=c["refused"],
        mistakes=c["mistakes"],
        updates=c["updates"],
        error_rate=_rate(c["mistakes"], judged),
        window={"trials": trials, "mistakes": mistakes, "error_rate": _rate(mistakes, trials)},
        confusion=confusion,
        curve=_curve(m.name, s.curve),
        changes=[{"version": v, "what": what} for v, what in m.marks],
        internal=summary.get("internal"),
        learners=summary.get("learners"),
        leader=summary.get("leader"),
        experts=summary.get("experts"),
        scorecards=summary.get("scorecards"),
        summary_version=s.summary_version,
    )


# the document last made for each model, as JSON, with the statistics it was made of: the
# store gives the same statistics object again while nothing changed; and the mistake
# curve last written, with the points it was written from (the same list while it is)
_made: dict[str, tuple[Statistics, orjson.Fragment]] = {}
_curves: dict[str, tuple[list[tuple[int, int]], orjson.Fragment]] = {}
MADE_KEPT = 4_096


def _kept(kept: dict[str, Any], name: str, value: Any) -> None:
    if len(kept) >= MADE_KEPT:
        kept.clear()
    kept[name] = value


def _curve(name: str, points: list[tuple[int, int]]) -> orjson.Fragment:
    """The curve ``points`` as JSON, written again only when they changed."""
    kept = _curves.get(name)
    if kept is not None and kept[0] is points:
        return kept[1]
    text = orjson.Fragment(orjson.dumps(points))
    _kept(_curves, name, (points, text))
    return text


async def read_stats(service: ModelService, name: str) -> orjson.Fragment:
    """The statistics document of model ``name``, as JSON: the route's answer, also
    served ahead of the router (:mod:`app.http.fastpath`), since dashboards poll it."""
    check_name(name)
    s = await service.statistics(name)
    kept = _made.get(name)
    if kept is not None and kept[0] is s:
        return kept[1]
    doc = orjson.Fragment(orjson.dumps(public(s)))
    _kept(_made, name, (s, doc))
    return doc


@router.get("/stats", response_model=StatsPublic)
@access(READ, model="name")
async def stats(name: NameParam, service: ServiceDep) -> Response:
    """Counters, error rates, confusion counts, the mistake curve, and what the learner
    shows: recycling's internal mistakes, V-Combine's leader, fusion weights and the
    scorecards of a fusion model's classifiers."""
    return answer(await read_stats(service, name))


@router.get("/endpoints", response_model=EndpointsPublic)
@access(READ, model="name")
async def endpoints(name: NameParam, service: ServiceDep) -> Response:
    """The experts' endpoints (docs/fanout.rst): each one's circuit breaker and the
    outcomes of its latest answers, as the worker that answers sees them."""
    check_name(name)
    m = await service.replicas.live(name)
    return answer(service.trials.fanout.health(name, m.space))
