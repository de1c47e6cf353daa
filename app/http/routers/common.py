"""Lean request handling for the per-trial routes, which run thousands of times a second.

These routes read and validate the body themselves (:class:`app.http.bodies.Body`) and answer
with bytes from orjson, skipping FastAPI's generic body and response machinery. Their
OpenAPI description is the same as a declared body's would be: :func:`body` puts the
body's schema under ``components`` (see :func:`add_components`).
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import FastAPI, Response

from app.core.errors import BadInput
from app.http.bodies import Body
from app.service.model_service import body_digest
from storage.keys import IDEMPOTENCY_KEY_PATTERN, NAME_PATTERN, valid_idempotency_key, valid_name
from storage.repository import Idempotency

_REF = "#/components/schemas/{model}"
_BODIES: list[Body[Any]] = []


def body(kind: Body[Any]) -> dict[str, Any]:
    """``openapi_extra`` declaring ``kind`` as the JSON request body."""
    _BODIES.append(kind)
    ref = {"$ref": _REF.format(model=kind.name)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def add_components(app: FastAPI) -> None:
    """Make the app's OpenAPI document include the schemas :func:`body` refers to."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = generate()
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            for kind in _BODIES:
                schema = kind.schema(ref_template=_REF)
                schemas.update(schema.pop("$defs", {}))
                schemas[kind.name] = schema
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]


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
    return Idempotency(key, body_digest(op, name, raw))


def answer(doc: Any) -> Response:
    return Response(orjson.dumps(doc), media_type="application/json")
