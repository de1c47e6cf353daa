"""A model's alerts: what its drift watch detected, and what an alert does."""

from __future__ import annotations

from fastapi import APIRouter

from app.http.deps import NameDep, ServiceDep
from app.http.permissions import ADMIN, READ, access
from app.http.schemas import AlertsConfig, AlertsPublic

router = APIRouter(prefix="/v1", tags=["models"])


@router.get("/models/{name}/alerts")
@access(READ, model="name")
async def alerts(name: NameDep, service: ServiceDep) -> AlertsPublic:
    """The alerts the model's drift watch raised (the latest 64): where a detector over
    the model's mistake stream, or a sub-expert's, found its error rate risen, with the
    rates before and after; as of the model's latest version, the same on every worker.
    With its detector, its recent error rates and its alert config."""
    return AlertsPublic(**await service.alerts.read(name))


@router.put("/models/{name}/alerts")
@access(ADMIN, model="name", action="configure alerts")
async def configure(name: NameDep, body: AlertsConfig, service: ServiceDep) -> AlertsPublic:
    """Set what the model's alerts do from now: POST each to ``webhook_url`` (its host
    must match one of the operator's ``alert_allowed_hosts``: a 422 naming the field
    otherwise), and with ``rollback`` roll the model back on a rise of its error rate."""
    await service.alerts.configure(name, body.model_dump())
    return AlertsPublic(**await service.alerts.read(name))
