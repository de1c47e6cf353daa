"""Shadow challengers of a model: learners that follow its trials without answering."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response, status

from app.http.deps import IdempotencyKeyDep, NameDep, ServiceDep
from app.http.permissions import ADMIN, READ, access
from app.http.routers.common import idempotency
from app.http.schemas import ChallengerCreate, ChallengersPublic
from storage.keys import NAME_PATTERN

router = APIRouter(prefix="/v1", tags=["models"])

ChallengerDep = Annotated[
    str, Path(pattern=NAME_PATTERN, description="a challenger's name", examples=["candidate"])
]


async def _figures(service: Any, name: str) -> ChallengersPublic:
    return ChallengersPublic(**await service.challengers.read(name))


@router.post("/models/{name}/challengers", status_code=status.HTTP_201_CREATED)
@access(ADMIN, model="name", action="attach challenger")
async def attach(
    name: NameDep,
    body: ChallengerCreate,
    request: Request,
    service: ServiceDep,
    key: IdempotencyKeyDep = None,
) -> ChallengersPublic:
    """Attach a learner as a shadow challenger: from the entry this writes in the model's
    log on, every worker feeds it every trial the model learns, in log order. It
    predicts each trial before learning it and is judged on the same label as the
    model's learner, whose mistakes on the same trials are counted beside its own; it
    never answers a client. Answers the model's challengers. 422 naming the field for a
    name taken, a learner the model's input cannot feed, or one beyond
    ``max_challengers`` or ``max_learner_bytes`` (counted with the model's learner and
    its other challengers). With an ``Idempotency-Key``, a retry attaches it once."""
    idem = idempotency(key, "challenger", name, await request.body())
    await service.challengers.attach(name, body.name, body.learner, idem)
    return await _figures(service, name)


@router.get("/models/{name}/challengers")
@access(READ, model="name")
async def challengers(name: NameDep, service: ServiceDep) -> ChallengersPublic:
    """Each challenger's trials, mistakes, error rate and mistake curve beside the
    model's learner's on the same trials (the prediction served, for a labelled one),
    at the model's latest version: the same on every worker."""
    return await _figures(service, name)


@router.post("/models/{name}/challengers/{challenger}/promote")
@access(ADMIN, model="name", action="promote challenger")
async def promote(
    name: NameDep,
    challenger: ChallengerDep,
    request: Request,
    service: ServiceDep,
    key: IdempotencyKeyDep = None,
) -> ChallengersPublic:
    """Make the challenger, as it is at the entry this writes in the model's log, the
    model's learner; the learner it replaces is gone, and a rollback to a version
    before brings both back as they were. 404 for a challenger the model does not have.
    With an ``Idempotency-Key``, a retry promotes it once."""
    idem = idempotency(key, "promote", name, f"{challenger}".encode())
    await service.challengers.promote(name, challenger, idem)
    return await _figures(service, name)


@router.delete("/models/{name}/challengers/{challenger}", status_code=status.HTTP_204_NO_CONTENT)
@access(ADMIN, model="name", action="retire challenger")
async def retire(
    name: NameDep,
    challenger: ChallengerDep,
    service: ServiceDep,
    key: IdempotencyKeyDep = None,
) -> Response:
    """Retire the challenger: it no longer follows the model. 404 for a challenger the
    model does not have. With an ``Idempotency-Key``, a retry retires it once."""
    idem = idempotency(key, "retire", name, f"{challenger}".encode())
    await service.challengers.retire(name, challenger, idem)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
