"""The trial calls and the statistics read, served ahead of FastAPI's router.

``POST /v1/models/{name}/predict``, ``/label``, ``/learn`` and their batch forms run
thousands of times a second, and dashboards poll ``GET /v1/models/{name}/stats``; this
middleware hands them straight to the same handlers the routes use
(:data:`app.http.routers.trials.HANDLERS`, :func:`app.http.routers.stats.read_stats`), with
the same answers and errors, without the router's dependency machinery. The route is the
one the guard found in the app's route table (:func:`app.http.permissions.found_route`);
everything else passes through.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any

import orjson
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from app.http.error_status import error_body
from app.http.permissions import found_route
from app.http.routers import stats
from app.http.routers.trials import HANDLERS, router

__all__ = ["TrialFastPath"]

log = logging.getLogger("committee.api")


# the endpoints served here, found by the route the guard matched: each trial call by its
# name in HANDLERS, and the statistics read
_CALLS: dict[Any, str] = {
    route.endpoint: route.path.removeprefix(router.prefix + "/")
    for route in router.routes
    if isinstance(route, APIRoute) and route.path.removeprefix(router.prefix + "/") in HANDLERS
}
if len(_CALLS) != len(HANDLERS):
    raise RuntimeError(
        f"trial calls without a route: {sorted(set(HANDLERS) - set(_CALLS.values()))}"
    )
_JSON = (b"content-type", b"application/json")


class TrialFastPath:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = found_route(scope) if scope["type"] == "http" else None
        if found is None or found.route is None or found.model is None:
            await self.app(scope, receive, send)
            return
        endpoint = found.route.endpoint  # type: ignore[attr-defined]
        if endpoint is stats.stats:
            scope["route"] = found.route  # for the request metrics
            service = scope["app"].state.service
            await self._answer(scope, send, stats.read_stats(service, found.model))
            return
        op = _CALLS.get(endpoint)
        if op is None:
            await self.app(scope, receive, send)
            return
        scope["route"] = found.route
        chunks = []
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        key = next((v for k, v in scope["headers"] if k == b"idempotency-key"), None)
        call = HANDLERS[op](
            scope["app"].state.service.trials,
            found.model,
            b"".join(chunks),
            None if key is None else key.decode("latin-1"),
            scope.get("committee.admit"),
        )
        await self._answer(scope, send, call)

    @staticmethod
    async def _answer(scope: Scope, send: Send, call: Awaitable[Any]) -> None:
        """Send what ``call`` answers, or the error it raises, as JSON."""
        headers = [_JSON]
        try:
            doc = await call
            status = 200
        except Exception as e:
            status, doc, extra = error_body(e)
            if status >= 500:
                log.error("%s %s: %s", scope["method"], scope["path"], e, exc_info=status == 500)
            headers += [(k.lower().encode(), v.encode()) for k, v in (extra or {}).items()]
        body = orjson.dumps(doc)
        headers.append((b"content-length", b"%d" % len(body)))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
