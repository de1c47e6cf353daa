"""The trial calls and the statistics read, served ahead of FastAPI's router.

``POST /v1/models/{name}/predict``, ``/label``, ``/learn`` and their batch forms run
thousands of times a second, and dashboards poll ``GET /v1/models/{name}/stats``; this
middleware hands them straight to the same handlers the routes use
(:data:`app.http.routers.trials.HANDLERS`, :func:`app.http.routers.stats.read_stats`), with the same
answers and errors, without the router's matching and dependency machinery. Everything
else passes through.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable
from types import SimpleNamespace
from typing import Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from app.http.error_status import error_body
from app.http.routers import stats
from app.http.routers.trials import HANDLERS, router

__all__ = ["TrialFastPath"]

log = logging.getLogger("committee.api")


def _under(prefix: str, rest: str) -> re.Pattern[str]:
    """The paths of a router's ``prefix`` with any name, then ``rest`` (a pattern)."""
    return re.compile(re.escape(prefix).replace(re.escape("{name}"), "([^/]+)") + rest)


# the trial routes' paths: a call of HANDLERS under the router's prefix
_PATH = _under(router.prefix, f"/({'|'.join(map(re.escape, HANDLERS))})")
_ROUTES = {call: SimpleNamespace(path=f"{router.prefix}/{call}") for call in HANDLERS}
_STATS = _under(stats.router.prefix, "/stats")
_STATS_ROUTE = SimpleNamespace(path=f"{stats.router.prefix}/stats")
_JSON = (b"content-type", b"application/json")


class TrialFastPath:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "GET":
            match = _STATS.fullmatch(scope["path"])
            if match is None:
                await self.app(scope, receive, send)
                return
            scope["route"] = _STATS_ROUTE
            service = scope["app"].state.service
            await self._answer(scope, send, stats.read_stats(service, match[1]))
            return
        match = _PATH.fullmatch(scope["path"])
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
        key = next((v for k, v in scope["headers"] if k == b"idempotency-key"), None)
        call = HANDLERS[op](
            scope["app"].state.service.trials,
            name,
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
