"""The edge peer of ``bench/service.py``: the service's own ASGI edge with nothing behind it.

The app runs the middleware the service runs, in the same order (request metrics, the
in-flight limit, the guard with auth off, the body limit), and in place of the trial
calls' fast path a dispatcher that matches the same paths, reads the body the same way,
parses it with orjson and answers a small orjson object: what any request to the service
costs before its model is touched, so the service's throughput over this one is the share
of its own ceiling it reaches. ``POST /parse/learn/batch`` parses a batch and answers its
item count; ``POST /parse/append/learn/batch`` also appends each item, as orjson writes
it, to a Redis stream (``EDGE_REDIS_URL``), all in one script call over the service's
own connection (:class:`storage.resp.Connection`): the least a service that keeps every
trial it takes must do beside parsing. The single trial calls under
``/append`` (``POST /append/v1/models/{name}/predict``, ``.../label``, ``.../learn``) do
the same for one trial each: the calls of one model and kind arriving while one is in
flight are gathered as the service gathers them (:mod:`app.service.gather`), and each group's
bodies are appended in one script call before each is answered as the edge answers it.

The service serves the statistics read ahead of the router too, and so does the edge:
``GET /v1/models/{name}/stats`` answers, written by orjson, the document last given to
``PUT /edge/stats`` (a real answer of the service, so that both write the same document),
with nothing read behind it.

Its garbage collector is set as the service's (:mod:`app.core.collector`).

Served as ``uvicorn _service_edge:create --factory --app-dir bench``.
"""

from __future__ import annotations

import hashlib
import os
import re
from types import SimpleNamespace
from typing import Any

import orjson
from fastapi import FastAPI, HTTPException, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.core.collector import collect_less
from app.core.settings import Settings
from app.http.guard import Guard
from app.http.limits import BodyLimit, Busy
from app.http.main import fastapi_options
from app.http.metrics import RequestMetrics
from app.http.permissions import OPEN, READ, WRITE, RouteTable, access
from app.service.gather import Gathers
from app.service.trial_calls import GATHER_MOST
from storage.resp import Connection

_PATH = re.compile(
    r"(?P<keep>/append)?/v1/models/(?P<name>[^/]+)/(?P<op>predict|label|learn)(?P<batch>/batch)?"
    r"|/parse(?P<append>/append)?/learn/batch"
)
_STATS = re.compile(r"/v1/models/([^/]+)/stats")
_JSON = (b"content-type", b"application/json")
# each item as an entry of one stream, kept to about its last 100,000 (as the service
# trims its log), appended in order
APPEND = """
for i = 1, #ARGV do
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', 100000, '*', 'x', ARGV[i])
end
return #ARGV
"""
_APPEND_SHA = hashlib.sha1(APPEND.encode()).hexdigest()


class EdgeDispatch:
    """The fast path's shape: match, read the body, parse it, answer; nothing else."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        url = os.environ.get("EDGE_REDIS_URL")
        # the service's own connection to Redis, pipelined as its calls are
        self.redis = None if url is None else Connection(url)
        self._gathers: Gathers[tuple[str, str], bytes, int] = Gathers(self._kept, GATHER_MOST)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        got = _STATS.fullmatch(scope["path"]) if scope["method"] == "GET" else None
        if got is not None:
            doc = {**scope["app"].state.edge_stats, "name": got[1]}
            await self._send(send, orjson.dumps(doc))
            return
        match = _PATH.fullmatch(scope["path"])
        if match is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        doc = orjson.loads(raw)
        if match["op"] is None:
            if match["append"] is None:  # parse only: the item count
                answer = {"items": len(doc["items"])}
            else:
                items = [orjson.dumps(item) for item in doc["items"]]
                answer = {"items": await self._appended(items)}
        else:
            if match["keep"] is not None:  # kept first, gathered with others of the model
                await self._gathers((match["name"], match["op"]), raw)
            answer = {"trial_id": doc.get("trial_id"), "label": doc.get("label"), "ok": True}
        await self._send(send, orjson.dumps(answer))

    async def _appended(self, items: list[bytes]) -> int:
        """Append ``items`` to the stream in one script call; how many were."""
        if self.redis is None:
            raise RuntimeError("EDGE_REDIS_URL is not set: nowhere to append")
        return int(await self.redis.evalsha(_APPEND_SHA, APPEND, ["edge:log"], items))

    async def _kept(self, _: tuple[str, str], bodies: list[bytes]) -> list[int]:
        """A gathered group's bodies, appended: one result per body."""
        return [await self._appended(bodies)] * len(bodies)

    @staticmethod
    async def _send(send: Send, body: bytes) -> None:
        headers = [_JSON, (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def create() -> FastAPI:
    settings = Settings()
    app = FastAPI(
        title="the service's edge",
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        **fastapi_options(settings),
    )
    # auth off, as in the service it is compared with: the guard runs its checks and
    # lets the request through
    app.state.auth = SimpleNamespace(keyring=SimpleNamespace(ready=True, on=False))
    app.add_middleware(EdgeDispatch)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(Guard, settings=settings)
    app.add_middleware(Busy, most=settings.max_connections)
    app.add_middleware(RequestMetrics)

    @app.get("/healthz")
    @access(OPEN)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    # the paths EdgeDispatch answers, declared as the service's are, so the guard finds
    # them in a route table of the same kind (their endpoints run only for other calls)
    for path in (
        "/v1/models/{name}/{op}",
        "/v1/models/{name}/{op}/batch",
        "/append/v1/models/{name}/{op}",
        "/append/v1/models/{name}/{op}/batch",
    ):
        app.add_api_route(path, _no_such_call, methods=["POST"])
    for path in ("/parse/learn/batch", "/parse/append/learn/batch"):
        app.add_api_route(path, _no_model_call, methods=["POST"])
    app.add_api_route("/v1/models/{name}/stats", _no_stats, methods=["GET"])

    stats: dict[str, Any] = {}
    app.state.edge_stats = stats

    @app.put("/edge/stats")
    @access(OPEN)
    async def set_stats(request: Request) -> dict[str, int]:
        stats.clear()
        stats.update(orjson.loads(await request.body()))
        return {"fields": len(stats)}

    collect_less(settings.gc_threshold)
    app.state.routes = RouteTable(app.routes)
    return app


@access(WRITE, model="name")
async def _no_such_call(name: str, op: str) -> None:
    raise HTTPException(404, f"no call {op!r} here")


@access(WRITE)
async def _no_model_call() -> None:
    raise HTTPException(404, "answered by the edge's dispatch")


@access(READ, model="name")
async def _no_stats(name: str) -> None:
    raise HTTPException(404, "answered by the edge's dispatch")
