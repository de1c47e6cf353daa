"""``GET /metrics`` for Prometheus."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from app.http.deps import ServiceDep
from app.http.metrics import CONTENT_TYPE, render
from app.http.permissions import READ, access
from app.service.access import principal_of

router = APIRouter(tags=["operations"])


@router.get("/metrics", response_class=Response)
@access(READ)
async def metrics(request: Request, service: ServiceDep) -> Response:
    """Request latency histograms, and the counters of every model the key reaches and
    the scorecards of its classifiers (read from Redis). Needs a read key while auth is
    on (Prometheus: ``authorization``)."""
    stats = await service.all_statistics(principal_of(request.scope).sees)
    return Response(render(stats), media_type=CONTENT_TYPE)
