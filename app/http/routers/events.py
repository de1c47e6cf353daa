"""``GET /v1/models/{name}/events``: what happens to a model, pushed as server-sent events
(``text/event-stream``), instead of polling its statistics.

Each event has a type (``event:``), one JSON document (``data:``) and, but for ``end``,
the log position it reflects (``id:``): ``progress`` (the statistics document, as
``GET .../stats`` answers it, at most once per interval however many trials came),
``change`` (a change of the input, a challenger attached, promoted or retired, a reset),
``alert`` (a drift or bound alert, as ``GET .../alerts`` lists it) and ``challengers`` (their
figures, as ``GET .../challengers`` answers, at most once per interval). A client that
reconnects with ``Last-Event-ID`` (or ``?from=``, for one that cannot set headers) gets
what came after that position (:mod:`app.service.events`). A comment line keeps a quiet
stream open every ``events_heartbeat`` seconds. The stream ends with an ``end`` event
whose ``reason`` is ``deleted`` (the model was), ``revoked`` (the key was) or
``lifetime`` (``events_max_seconds`` passed: reconnect with the last id).

Bounds: ``events_max_connections`` streams per worker (a 503 naming the setting beyond),
one read of the model per interval (``every``, from ``events_min_every_ms``; default
``events_every_ms``), and no queue: events are written as they are made, and a reader
that does not keep up holds the stream back (TCP flow control), so what it has not read
yet is coalesced, never buffered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from app.core.errors import BadInput
from app.http.deps import NameDep, ServiceDep
from app.http.permissions import READ, access
from app.http.routers.stats import public
from app.service.access import Auth, principal_of
from app.service.events import MAX_POSITION, Event, Feed, position_of
from app.service.model_service import ModelService
from storage.errors import Unavailable

router = APIRouter(prefix="/v1/models/{name}", tags=["statistics"])
log = logging.getLogger("committee.events")

EVENT_STREAM = "text/event-stream"
LAST_EVENT_ID = "Last-Event-ID"
MOST_EVERY_MS = 60_000
KINDS = ("progress", "change", "alert", "challengers", "end")  # the events' types


class Open:
    """The event streams an app (a worker) has open."""

    def __init__(self) -> None:
        self.count = 0


def open_streams(request: Request) -> Open:
    """The app's count of open event streams (made with its first stream)."""
    got = getattr(request.app.state, "event_streams", None)
    if not isinstance(got, Open):
        got = request.app.state.event_streams = Open()
    return got


_STREAM = {
    200: {
        "description": "server-sent events: progress, change, alert, challengers, end (each "
        "a JSON document; the id is the log position it reflects)",
        # each event of the stream, as its fields
        "content": {
            EVENT_STREAM: {
                "schema": {
                    "type": "object",
                    "properties": {
                        "event": {"enum": list(KINDS)},
                        "id": {"type": "string", "pattern": "^[0-9]+$"},
                        "data": {"type": "string", "contentMediaType": "application/json"},
                        "retry": {"type": "integer", "minimum": 0},
                    },
                }
            }
        },
    }
}

LastEventId = Annotated[
    str | None,
    Header(
        alias=LAST_EVENT_ID,
        pattern=r"^[0-9]{1,19}$",
        description="resume after this log position: the id of the last event received",
    ),
]
FromQuery = Annotated[
    int | None,
    Query(
        alias="from",
        ge=0,
        le=MAX_POSITION,
        description=f"as {LAST_EVENT_ID}, for clients that cannot set headers (the header wins)",
    ),
]
EveryQuery = Annotated[
    int | None,
    Query(
        ge=1,
        le=MOST_EVERY_MS,
        description="milliseconds between reads of the model (events_min_every_ms at least; "
        "events_every_ms when not given)",
    ),
]


def frame(e: Event) -> bytes:
    """An event as the stream writes it."""
    head = b"event: %s\n" % e.kind.encode()
    if e.id is not None:
        head += b"id: %d\n" % e.id
    return head + b"data: " + e.data + b"\n\n"


class EventStream(Response):
    """The answer: frames written as ``source`` makes them. Its client going away sets
    the event ``source`` was given (the source stops between its reads of Redis, never
    cancelled in one); the stream is counted in ``streams`` until it ends."""

    media_type = EVENT_STREAM

    def __init__(self, source: Any, streams: Open) -> None:
        super().__init__(
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            media_type=EVENT_STREAM,
        )
        self.source, self.streams = source, streams
        # no length: the stream ends when the server ends it
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch())
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for chunk in self.source(gone):
                if gone.is_set():
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if not gone.is_set():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.streams.count -= 1
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher


def _end(reason: str, detail: str) -> bytes:
    return frame(Event("end", None, orjson.dumps({"reason": reason, "detail": detail})))


async def _progress(service: ModelService, name: str) -> tuple[int, str, list[Any], bytes]:
    s = await service.statistics(name)
    m = s.model
    return m.version, m.incarnation, m.marks, orjson.dumps(public(s))


def _events(service: ModelService, auth: Auth, request: Request, feed: Feed, every: float) -> Any:
    s = service.settings
    key = principal_of(request.scope).key
    stop = service.replicas.stopping

    async def source(gone: asyncio.Event) -> AsyncIterator[bytes]:
        yield b"retry: %d\n\n" % int(every * 1000)
        started = quiet = due = time.monotonic()  # quiet: when something was last sent
        while not (gone.is_set() or stop.is_set()):
            if time.monotonic() >= due:  # a read of the model
                if key is not None and not auth.keyring.current(key):
                    yield _end("revoked", "the API key was revoked")
                    return
                try:
                    events: list[Event] | None = await feed.step()
                except (TimeoutError, Unavailable) as e:  # Redis slow: the next read
                    log.warning("events of model %s: %s", feed.name, e)
                    events = []
                if events is None:
                    yield _end("deleted", f"model {feed.name!r} was deleted")
                    return
                if events:
                    yield b"".join(frame(e) for e in events)
                    quiet = time.monotonic()
                due = time.monotonic() + every
            now = time.monotonic()
            if now - quiet >= s.events_heartbeat:
                yield b": keep-alive\n\n"
                quiet = now
            if now - started >= s.events_max_seconds:
                yield _end("lifetime", f"{s.events_max_seconds:g} s (events_max_seconds)")
                return
            # the next read, keep-alive or the stream's end, whichever comes first
            wake = min(due, quiet + s.events_heartbeat, started + s.events_max_seconds)
            await _until(gone, stop, max(0.0, wake - now))

    return source


async def _until(gone: asyncio.Event, stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds``, or less once either event is set."""
    waits = [asyncio.ensure_future(gone.wait()), asyncio.ensure_future(stop.wait())]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


@router.get("/events", response_class=Response, responses=_STREAM)  # type: ignore[arg-type]
@access(READ, model="name")
async def events(
    name: NameDep,
    request: Request,
    service: ServiceDep,
    last_event_id: LastEventId = None,
    from_: FromQuery = None,
    every: EveryQuery = None,
) -> Response:
    """The model's events, pushed as they happen (server-sent events): its progress
    (the statistics document), its changes, its drift alerts and its challengers'
    figures, each with the log position it reflects as its id. Resume with
    ``Last-Event-ID`` (or ``from``): a position beyond the model's log is a 422 naming
    it. Beyond ``events_max_connections`` streams on the worker: a 503 (try again after
    ``Retry-After``). The stream ends with an ``end`` event (the model deleted, the key
    revoked, or ``events_max_seconds`` passed: reconnect with the last id)."""
    s = service.settings
    if every is not None and every < s.events_min_every_ms:
        raise BadInput(
            "every",
            f"{every}: expected at least {s.events_min_every_ms} (events_min_every_ms)",
            "query",
        )
    after: int | None = from_
    field, where = "from", "query"
    if last_event_id is not None:
        after = position_of(last_event_id, LAST_EVENT_ID, "header")
        field, where = LAST_EVENT_ID, "header"
    feed = Feed(service, name, lambda n: _progress(service, n))
    await feed.start(after, field, where)
    streams = open_streams(request)
    if streams.count >= s.events_max_connections:
        most = s.events_max_connections
        return JSONResponse(
            {
                "detail": f"{most} event streams are open on this worker "
                "(events_max_connections): try again later, or poll GET .../stats",
                "limit": "events_max_connections",
                "max": most,
            },
            status_code=503,
            headers={"Retry-After": "1"},
        )
    streams.count += 1  # before any await: the count never lags
    auth: Auth = request.app.state.auth
    period = (s.events_every_ms if every is None else every) / 1000
    return EventStream(_events(service, auth, request, feed, period), streams)
