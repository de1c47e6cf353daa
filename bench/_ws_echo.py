"""The WebSocket peer of ``bench/stream.py``: uvicorn and Starlette, one route that parses
each JSON message with orjson and answers a small object naming its id, nothing behind
it. What a message through a WebSocket of this stack costs before any work is done, so
the stream's throughput over this one is the share of its own ceiling it reaches. Served
as ``uvicorn _ws_echo:app --app-dir bench``.
"""

from __future__ import annotations

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect


async def echo(ws: WebSocket) -> None:
    await ws.accept()
    try:
        while True:
            doc = orjson.loads(await ws.receive_text())
            await ws.send_text(orjson.dumps({"id": doc.get("id"), "result": {"ok": True}}).decode())
    except WebSocketDisconnect:
        pass


async def healthz(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


app = Starlette(
    routes=[Route("/healthz", healthz), WebSocketRoute("/v1/models/{name}/stream", echo)]
)
