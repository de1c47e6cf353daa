"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request

from app.http.deps import ServiceDep
from app.http.permissions import OPEN, access

router = APIRouter(tags=["health"])

WARMING = "warming up: compiling kernels"
WARMING_RETRY_AFTER = "2"  # seconds


@router.get("/healthz")
@access(OPEN)
async def healthz() -> dict[str, str]:
    """The process is alive (also while it warms up)."""
    return {"status": "ok"}


@router.get("/readyz")
@access(OPEN)
async def readyz(request: Request, service: ServiceDep) -> dict[str, str]:
    """The learners' kernels are compiled and Redis answers (503 until then)."""
    warmup = getattr(request.app.state, "warmup", None)
    if warmup is not None and not warmup.ready:
        raise HTTPException(503, WARMING, headers={"Retry-After": WARMING_RETRY_AFTER})
    await service.store.ping()
    return {"status": "ready"}
