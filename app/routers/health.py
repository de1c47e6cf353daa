"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import ServiceDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(service: ServiceDep) -> dict[str, str]:
    """Redis answers (503 when it does not)."""
    await service.store.ping()
    return {"status": "ready"}
