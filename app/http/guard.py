"""The guard every HTTP request and WebSocket passes before anything else reads it.

In order: the Host header (against DNS rebinding), the Origin of a WebSocket (against
cross-site pages), the Content-Type of a POST, PUT or PATCH body (JSON only: a cross-site
form or ``text/plain`` POST is refused before it is read), then, while auth is on, the
key (401), the model's tenancy (404, as if the model did not exist), the scope (403) and
the key's request rate (429). Admin actions and denied requests go to the audit log.

What each route needs is what it declares (:mod:`app.http.permissions`); the guard finds
the route from the method and path alone, so the fast path's trial calls are guarded
like every other route, and a path no route serves is refused here.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.settings import Settings
from app.http.error_status import rate_headers
from app.http.limits import answer
from app.http.permissions import ADMIN, ADMIN_ALL, found_route
from app.service.access import Auth, Principal
from storage.errors import RateLimited, StorageError

__all__ = ["Guard"]

log = logging.getLogger("committee.auth")
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _json(detail: str, **extra: Any) -> bytes:
    return orjson.dumps({"detail": detail, **extra})


class Guard:
    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.hosts = frozenset(settings.hosts())
        self.any_host = "*" in self.hosts
        self.origins = frozenset(o.rstrip("/").lower() for o in settings.allowed_origins)
        self.any_origin = "*" in self.origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = origin = auth = ctype = b""
        body = False
        for k, v in scope["headers"]:
            if k == b"host":
                host = v
            elif k == b"authorization":
                auth = v
            elif k == b"content-type":
                ctype = v
            elif k == b"origin":
                origin = v
            elif k == b"content-length":
                body = v != b"0"
            elif k == b"transfer-encoding":
                body = True
        if not self.any_host and _hostname(host) not in self.hosts:
            detail = f"Host {host[:100].decode('latin-1')!r} is not served here (allowed_hosts)"
            await self._refuse(scope, receive, send, 400, detail, 0)
            return
        http = kind == "http"
        if not http and origin and not self._origin_ok(origin, host):
            # a page of another site: refused before the handshake completes
            await receive()
            await send({"type": "websocket.close", "code": 1008, "reason": "origin not allowed"})
            return
        method = scope["method"] if http else "GET"
        if http and body and method in WRITE_METHODS and not _is_json(ctype):
            detail = "expected a JSON body (Content-Type: application/json)"
            await self._refuse(scope, receive, send, 415, detail, 0)
            return
        path = scope["path"]
        found = found_route(scope)
        if found is None:
            await self._refuse(scope, receive, send, 404, f"no route serves {method} {path}", 4404)
            return
        need, model = found.access.scope, found.model
        if need is None:
            await self.app(scope, receive, send)
            return
        a: Auth = scope["app"].state.auth
        ring = a.keyring
        if not ring.ready:
            detail = "reading the API keys from Redis: retry shortly"
            await self._refuse(scope, receive, send, 503, detail, 1013, (b"retry-after", b"1"))
            return
        if not ring.on and auth[:7].lower() == b"bearer ":
            # a key shown to a worker that knows none: one was made a moment ago on
            # another worker or host, perhaps, and auth is on from then (the table of a
            # service without keys is empty: cheap to read, and reads at once share one)
            try:
                await ring.reload()
            except StorageError as e:
                await self._refuse(scope, receive, send, 503, str(e), 1013)
                return
        principal = Principal(None)
        if ring.on:
            key = None
            if auth[:7].lower() == b"bearer ":
                try:
                    key = await ring.find(auth[7:].strip().decode("ascii"))
                except UnicodeDecodeError:
                    key = None
                except StorageError as e:
                    await self._refuse(scope, receive, send, 503, str(e), 1013)
                    return
            if key is None:
                detail = "an API key is needed: Authorization: Bearer <key>"
                await self._refuse(
                    scope, receive, send, 401, detail, 4401, (b"www-authenticate", b"Bearer")
                )
                await a.audit(principal, f"denied {method} {path}", model, 401, "no valid key")
                return
            principal = Principal(key)
            if model is not None and not principal.sees(model):
                detail = f"model {model!r} does not exist"
                await self._refuse(scope, receive, send, 404, detail, 4404)
                await a.audit(principal, f"denied {method} {path}", model, 404, "other tenant")
                return
            if not principal.may(ADMIN if need == ADMIN_ALL else need) or (
                need == ADMIN_ALL and principal.confined
            ):
                detail = _scope_detail(key.scope, need, method, path)
                await self._refuse(scope, receive, send, 403, detail, 4403)
                await a.audit(principal, f"denied {method} {path}", model, 403, detail)
                return
            try:
                await a.limiter.admit(key, "requests")
            except RateLimited as e:
                await self._limited(scope, receive, send, e)
                return
            except StorageError as e:
                await self._refuse(scope, receive, send, 503, str(e), 1013)
                return
            scope["committee.admit"] = a.admit_trials(key)
        scope["committee.principal"] = principal
        action = found.access.action if http and found.route is not None else None
        if action is None:
            await self.app(scope, receive, send)
            return
        status = 500

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            target = scope.get("committee.model", model)
            await a.audit(principal, action, target, status, scope.get("committee.detail", ""))

    def _origin_ok(self, origin: bytes, host: bytes) -> bool:
        o = origin.decode("latin-1").rstrip("/").lower()
        if self.any_origin or o in self.origins:
            return True
        parts = urlsplit(o)  # the service's own origin: the same host and port
        return parts.scheme in ("http", "https") and parts.netloc == host.decode("latin-1").lower()

    async def _refuse(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        status: int,
        detail: str,
        ws_code: int,
        *extra: tuple[bytes, bytes],
    ) -> None:
        if scope["type"] == "http":
            await answer(send, status, _json(detail), *extra)
            return
        # a stream is accepted, then closed with the code, so a client can tell why
        await receive()
        if ws_code == 0:
            await send({"type": "websocket.close", "code": 1008, "reason": detail[:120]})
            return
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": ws_code, "reason": detail[:120]})

    async def _limited(self, scope: Scope, receive: Receive, send: Send, e: RateLimited) -> None:
        headers = [(k.lower().encode(), v.encode()) for k, v in rate_headers(e).items()]
        detail = _json(str(e), limit=e.limit, max=e.most)
        if scope["type"] == "http":
            await answer(send, 429, detail, *headers)
            return
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 4429, "reason": str(e)[:120]})


def _hostname(host: bytes) -> str:
    h = host.decode("latin-1").lower()
    if h.startswith("["):  # [::1]:8000
        return h[: h.find("]") + 1] if "]" in h else h
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


def _is_json(ctype: bytes) -> bool:
    """JSON, or NDJSON (``POST .../log``): neither can a cross-site form send."""
    return ctype.split(b";", 1)[0].strip().lower() in (b"application/json", b"application/x-ndjson")


def _scope_detail(scope: str, need: str, method: str, path: str) -> str:
    if need == ADMIN_ALL:
        return f"{method} {path} needs an admin key for every model (models '*')"
    article = "an" if need == "admin" else "a"
    return f"{method} {path} needs {article} {need} key; this key's scope is {scope}"
