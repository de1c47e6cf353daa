"""API keys and the audit log, for admins whose key reaches every model.

While no key exists auth is off and these routes are open like every other: making the
first key turns auth on.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response, status

from app.http.permissions import ADMIN_ALL, access
from app.http.schemas import (
    AUDIT_ID,
    AuditPublic,
    KeyCreate,
    KeyCreated,
    KeyPublic,
    KeysPublic,
)
from app.service.access import Auth, principal_of

router = APIRouter(prefix="/v1", tags=["security"])


def _auth(request: Request) -> Auth:
    auth: Auth = request.app.state.auth
    return auth


@router.post("/keys", status_code=status.HTTP_201_CREATED)
@access(ADMIN_ALL, action="create key")
async def create_key(body: KeyCreate, request: Request) -> KeyCreated:
    """Make a key; its secret is in this answer only (``key``): only a hash is stored."""
    a = _auth(request)
    limits = body.limits.model_dump(exclude_none=True) if body.limits else {}
    key, secret = await a.store.create(body.scope, body.models, body.name, limits)
    await a.keyring.reload()  # this worker knows it at once; the others within a second
    request.scope["committee.detail"] = f"key {key.id}: {key.scope} on {key.models!r}"
    return KeyCreated(key=secret, **key.public())


@router.get("/keys")
@access(ADMIN_ALL)
async def list_keys(request: Request) -> KeysPublic:
    """Every key, without its secret."""
    _, keys = await _auth(request).store.load()
    return KeysPublic(keys=[KeyPublic(**k.public()) for k in keys])


@router.delete("/keys/{key_id}", status_code=status.HTTP_204_NO_CONTENT)
@access(ADMIN_ALL, action="revoke key")
async def revoke_key(key_id: str, request: Request) -> Response:
    """Revoke a key: every worker refuses it within a second. 404 for an unknown id; 409
    for the key that makes the request, and for the last admin key on every model."""
    a = _auth(request)
    request.scope["committee.detail"] = f"key {key_id[:40]}"
    if len(key_id) > 64 or not await a.revoke(principal_of(request.scope), key_id):
        raise HTTPException(404, f"no API key with id {key_id[:64]!r}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/audit")
@access(ADMIN_ALL)
async def audit(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=1000, description="entries, newest first")] = 100,
    before: Annotated[
        str | None, Query(pattern=AUDIT_ID, description="only entries older than this id")
    ] = None,
) -> AuditPublic:
    """Admin actions (create, delete, state export and import, keys made and revoked)
    and denied requests, newest first."""
    if before is not None:
        ms, n = (int(part) for part in before.split("-"))
        if ms == n == 0:  # nothing is older than the first possible entry
            return AuditPublic(entries=[])
        before = f"{ms}-{n}"
    entries = await _auth(request).store.read_audit(limit, before)
    return AuditPublic.model_validate({"entries": [e.public() for e in entries]})
