"""API keys and the audit log, for admins whose key reaches every model.

While no key exists auth is off and these routes are open like every other: making the
first key turns auth on.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response, status

from app.core.errors import BadInput
from app.http.permissions import ADMIN_ALL, access
from app.http.schemas import AuditPublic, KeyCreate, KeyCreated, KeyPublic, KeysPublic
from app.service.access import Auth

router = APIRouter(prefix="/v1", tags=["security"])
AUDIT_ID = r"^\d{1,20}-\d{1,20}$"


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
    """Revoke a key: every worker refuses it within a second. 404 for an unknown id."""
    a = _auth(request)
    request.scope["committee.detail"] = f"key {key_id[:40]}"
    if len(key_id) > 64 or not await a.store.revoke(key_id):
        raise HTTPException(404, f"no API key with id {key_id[:64]!r}")
    await a.keyring.reload()
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
        if max(ms, n) >= 2**64:
            raise BadInput("before", "expected an entry id '<ms>-<n>' of 64-bit numbers", "query")
        if ms == n == 0:  # nothing is older than the first possible entry
            return AuditPublic(entries=[])
        before = f"{ms}-{n}"
    entries = await _auth(request).store.read_audit(limit, before)
    return AuditPublic.model_validate({"entries": [e.public() for e in entries]})
