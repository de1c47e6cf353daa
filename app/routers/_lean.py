"""Lean request handling for the per-trial routes, which run thousands of times a second.

These routes read the body themselves and validate it with pydantic's JSON parser in one
step, and answer with bytes from orjson, skipping FastAPI's generic body and response
machinery. Their OpenAPI description is the same as a declared body's would be:
:func:`body` puts the model's schema under ``components`` (see :func:`add_components`).
"""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from app.errors import BadInput
from app.service import request_digest
from storage.keys import IDEMPOTENCY_KEY_PATTERN, NAME_PATTERN, valid_idempotency_key, valid_name
from storage.repository import Idempotency

M = TypeVar("M", bound=BaseModel)
_REF = "#/components/schemas/{model}"
_MODELS: list[type[BaseModel]] = []


def body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` declaring ``model`` as the JSON request body."""
    _MODELS.append(model)
    ref = {"$ref": _REF.format(model=model.__name__)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def add_components(app: FastAPI) -> None:
    """Make the app's OpenAPI document include the schemas :func:`body` refers to."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = generate()
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            for model in _MODELS:
                schema = model.model_json_schema(ref_template=_REF)
                schemas.update(schema.pop("$defs", {}))
                schemas[model.__name__] = schema
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]


def _plain(value: Any) -> bool:
    """Whether orjson can write ``value`` (the answers are orjson's)."""
    try:
        orjson.dumps(value)
    except TypeError:
        return False
    return True


def parse(raw: bytes, model: type[M]) -> M:
    """The body as ``model``; a 422 like FastAPI's own when it is not."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as e:
        errors = e.errors(include_url=False, include_context=False)
        for err in errors:
            err["loc"] = ("body", *err["loc"])
            if isinstance(err.get("input"), bytes):  # a body that is not UTF-8, say
                err["input"] = err["input"][:64].decode("utf-8", "replace")
            elif not _plain(err.get("input")):  # an integer beyond 64 bits, say
                err["input"] = None
        raise RequestValidationError(errors) from None


def check_name(name: str) -> None:
    if not valid_name(name):
        raise BadInput("name", f"model name {name[:80]!r}: expected {NAME_PATTERN}", "path")


def idempotency(key: str | None, op: str, name: str, raw: bytes) -> Idempotency | None:
    """The ``Idempotency-Key`` header of a write and a hash of what it asks for."""
    if key is None:
        return None
    if not valid_idempotency_key(key):
        raise BadInput(
            "Idempotency-Key", f"{key[:80]!r}: expected {IDEMPOTENCY_KEY_PATTERN}", "header"
        )
    return Idempotency(key, request_digest(op, name, raw))


def answer(doc: dict[str, Any]) -> Response:
    return Response(orjson.dumps(doc), media_type="application/json")
