"""FastAPI dependencies as short ``Annotated`` aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Path, Request

from app.service import ModelService
from storage.keys import IDEMPOTENCY_KEY_PATTERN, NAME_PATTERN


async def get_service(request: Request) -> ModelService:
    service: ModelService = request.app.state.service
    return service


ServiceDep = Annotated[ModelService, Depends(get_service)]
NameDep = Annotated[str, Path(pattern=NAME_PATTERN, description="the model's name")]
IdempotencyKeyDep = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description="a retry with the same key gets the first answer; "
        "the same key with another request is a 409",
    ),
]
