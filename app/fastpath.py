"""The trial calls served ahead of FastAPI's router.

``POST /v1/models/{name}/predict``, ``/label``, ``/learn`` and their batch forms run
thousands of times a second; this middleware hands them straight to the same handlers the
routes use (:data:`app.routers.trials.HANDLERS`), with the same answers and errors,
without the router's matching and dependency machinery. Everything else passes through.
"""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from app.routers.trials import HANDLERS, router
from app.status import error_body

__all__ = ["TrialFastPath"]

log = logging.getLogger("committee.api")
# the routes' paths: the router's prefix with any name, then a call of HANDLERS
_PATH = re.compile(
    re.escape(router.prefix).replace(re.escape("{name}"), "([^/]+)")
    + f"/({'|'.join(map(re.escape, HANDLERS))})"
)
_ROUTES = {call: SimpleNamespace(path=f"{router.prefix}/{call}") for call in HANDLERS}
_JSON = (b"content-type", b"application/json")


class TrialFastPath:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _PATH.fullmatch(scope["path"]) if scope["type"] == "http" else None
        if match is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        name, op = match.groups()
        scope["route"] = _ROUTES[op]  # for the request metrics
        chunks = []
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        headers = [_JSON]
        try:
            key = next((v for k, v in scope["headers"] if k == b"idempotency-key"), None)
            doc = await HANDLERS[op](
                scope["app"].state.service.trials,
                name,
                b"".join(chunks),
                None if key is None else key.decode("latin-1"),
                scope.get("committee.admit"),
            )
            status = 200
        except Exception as e:
            status, doc, extra = error_body(e)
            if status >= 500:
                log.error("POST %s: %s", scope["path"], e, exc_info=status == 500)
            headers += [(k.lower().encode(), v.encode()) for k, v in (extra or {}).items()]
        body = orjson.dumps(doc)
        headers.append((b"content-length", b"%d" % len(body)))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
