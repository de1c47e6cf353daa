"""``WS /v1/models/{name}/stream``: predict, label and learn over one connection.

Each text message is one JSON request, ``{"op": "predict" | "label" | "learn", "id": ...,
...}`` with the fields of the REST call of that name; each gets one answer, in order,
``{"id": ..., "result": {...}}`` or ``{"id": ..., "error": {"status", "message",
"field"}}``. A bad message gets an error and the stream goes on. An unknown model closes
the stream with code 4404.

Requests queued together are applied together: consecutive ones of the same op become
one batch call (one Redis round trip), in order. At most ``QUEUE`` requests are read
ahead of the answers; beyond that the server stops reading and TCP flow control holds the
producer back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from typing import Any

import orjson
from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from app.errors import BadInput
from app.service import ModelService
from app.status import error_status, item_error
from storage.errors import ModelNotFound
from storage.keys import NAME_PATTERN, TRIAL_ID_PATTERN

router = APIRouter(tags=["stream"])
log = logging.getLogger("committee.stream")

QUEUE = 1024  # requests read ahead of their answers
BATCH = 512  # requests applied in one call at most
_TRIAL_ID = re.compile(TRIAL_ID_PATTERN)
_FIELDS = {
    "predict": ({"instance"}, {"trial_id", "track"}),
    "label": ({"trial_id", "label"}, set()),
    "learn": ({"instance", "label"}, set()),
}
_END = object()


class Request:
    __slots__ = ("args", "error", "id", "key", "op")

    def __init__(self, raw: str | bytes) -> None:
        self.id: Any = None
        self.op = ""
        self.key: tuple[str, Any] = ("", None)
        self.args: tuple[Any, Any] = (None, None)
        self.error: BadInput | None = None
        try:
            self._parse(raw)
        except BadInput as e:
            self.error = e

    def _parse(self, raw: str | bytes) -> None:
        try:
            msg = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise BadInput("message", f"not JSON: {e}") from None
        if not isinstance(msg, dict):
            raise BadInput("message", "expected a JSON object")
        self.id = msg.get("id")
        if isinstance(self.id, dict | list):
            self.id = None
            raise BadInput("id", "expected a string, a number or null")
        op = msg.get("op")
        if op not in _FIELDS:
            raise BadInput("op", f"{op!r}: expected 'predict', 'label' or 'learn'")
        need, optional = _FIELDS[op]
        for f in need - msg.keys():
            raise BadInput(f, f"missing: {op} needs {', '.join(sorted(need))}")
        for f in msg.keys() - need - optional - {"op", "id"}:
            raise BadInput(f, f"unknown field for {op}")
        if "instance" in msg and not isinstance(msg["instance"], dict):
            raise BadInput("instance", "expected an object with features and/or experts")
        label = msg.get("label")
        if "label" in need and (isinstance(label, bool) or not isinstance(label, str | int)):
            raise BadInput("label", f"{label!r}: expected a string or an integer")
        trial_id = msg.get("trial_id")
        if trial_id is not None and not (isinstance(trial_id, str) and _TRIAL_ID.match(trial_id)):
            raise BadInput("trial_id", f"{trial_id!r}: expected {TRIAL_ID_PATTERN}")
        track = msg.get("track", True)
        if not isinstance(track, bool):
            raise BadInput("track", "expected true or false")
        self.op = op
        self.key = (op, track)
        if op == "predict":
            self.args = (msg["instance"], trial_id)
        elif op == "label":
            self.args = (trial_id, label)
        else:
            self.args = (msg["instance"], label)


def _error(request_id: Any, e: Exception) -> bytes:
    return orjson.dumps({"id": request_id, "error": item_error(e)})


def _result(request_id: Any, result: dict[str, Any]) -> bytes:
    return orjson.dumps({"id": request_id, "result": result})


async def _apply(
    service: ModelService, name: str, group: list[Request]
) -> tuple[list[bytes], bool]:
    """The answers to a group of requests of one op, and whether the model is gone."""
    op, track = group[0].key
    args = [r.args for r in group]
    try:
        if op == "predict":
            results = await service.predict(name, args, track=track)
        elif op == "label":
            results = await service.label(name, args)
        else:
            results = await service.learn(name, args)
    except Exception as e:  # answered per request; the stream goes on
        if error_status(e)[0] == 500:
            log.exception("stream of model %s: %s", name, e)
        return [_error(r.id, e) for r in group], isinstance(e, ModelNotFound)
    frames = [
        _error(r.id, res) if isinstance(res, Exception) else _result(r.id, res)
        for r, res in zip(group, results, strict=True)
    ]
    return frames, False


async def _read(ws: WebSocket, queue: asyncio.Queue[Any]) -> None:
    try:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                break
            raw = message.get("text")
            if raw is None:
                raw = message.get("bytes") or b""
            await queue.put(Request(raw))
    finally:
        await queue.put(_END)


@router.websocket("/v1/models/{name}/stream")
async def stream(ws: WebSocket, name: str) -> None:
    service: ModelService = ws.app.state.service
    await ws.accept()
    if not re.match(NAME_PATTERN, name):
        await ws.close(code=4404, reason=f"model name {name!r} is not valid")
        return
    try:
        await service.live(name)
    except ModelNotFound as e:
        await ws.close(code=4404, reason=str(e))
        return
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=QUEUE)
    reader = asyncio.create_task(_read(ws, queue))
    try:
        done = False
        while not done:
            batch = [await queue.get()]
            while len(batch) < BATCH and not queue.empty():
                batch.append(queue.get_nowait())
            if batch[-1] is _END:
                batch.pop()
                done = True
            out: list[bytes] = []
            gone = False
            i = 0
            while i < len(batch):
                r = batch[i]
                if r.error is not None:
                    out.append(_error(r.id, r.error))
                    i += 1
                    continue
                j = i + 1
                while j < len(batch) and batch[j].error is None and batch[j].key == r.key:
                    j += 1
                frames, gone = await _apply(service, name, batch[i:j])
                out += frames
                i = j
                if gone:
                    break
            for frame in out:
                await ws.send_text(frame.decode())
            if gone:
                await ws.close(code=4404, reason=f"model {name!r} does not exist")
                return
    except WebSocketDisconnect:
        pass
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
            await reader
