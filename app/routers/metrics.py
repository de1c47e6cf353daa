"""``GET /metrics`` for Prometheus."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.deps import ServiceDep
from app.metrics import CONTENT_TYPE, render

router = APIRouter(tags=["operations"])


@router.get("/metrics", response_class=Response)
async def metrics(service: ServiceDep) -> Response:
    """Request latency histograms and every model's counters (read from Redis)."""
    return Response(render(await service.all_statistics()), media_type=CONTENT_TYPE)
