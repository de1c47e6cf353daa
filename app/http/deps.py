"""FastAPI dependencies as short ``Annotated`` aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Path, Request

from app.core.names import IdempotencyKey, IdempotencyKeyText, Name, NameText
from app.service.model_service import ModelService


async def get_service(request: Request) -> ModelService:
    service: ModelService = request.app.state.service
    return service


ServiceDep = Annotated[ModelService, Depends(get_service)]
_NAME = "the model's name"
_KEY = "a retry with the same key gets the first answer; the same key with another request is a 409"
NameDep = Annotated[Name, Path(description=_NAME)]
IdempotencyKeyDep = Annotated[
    IdempotencyKey | None, Header(alias="Idempotency-Key", description=_KEY)
]
# declared for OpenAPI only: the trial calls check them themselves, the same behind the
# router and on the fast path (app.http.fastpath)
NameParam = Annotated[NameText, Path(description=_NAME)]
IdempotencyKeyParam = Annotated[
    IdempotencyKeyText | None, Header(alias="Idempotency-Key", description=_KEY)
]
