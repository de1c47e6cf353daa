"""Plain ASGI middleware bounding a worker's requests: their headers (431 beyond
``max_headers`` fields or ``max_header_bytes``), their bodies (415 for a
``Content-Encoding``, 413 beyond ``max_body_bytes``, 422 beyond ``max_json_depth``), a cap
on requests in flight (503), and a 503 for requests cut by a worker's shutdown.

uvicorn's httptools parser bounds neither the size nor the number of header fields, so
they are counted here, before anything reads them."""

from __future__ import annotations

import asyncio

import numpy as np
import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.settings import Settings
from app.http.routers.trials import HANDLERS

_DEFAULTS = Settings.model_fields
_MODELS = "/v1/models/"
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})  # those whose body the app reads
_TRIAL_CALLS = tuple("/" + call for call in HANDLERS)
# +1 for [ and {, -1 for ] and }: a body's nesting is the running sum, outside strings
_STEP = np.zeros(256, dtype=np.int8)
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1
_QUOTE, _BACKSLASH = ord('"'), ord("\\")


def _replay(messages: list[Message], then: Receive | None = None) -> Receive:
    """A receive that gives ``messages`` first, then defers to ``then``."""
    queue = list(messages)

    async def receive() -> Message:
        if queue:
            return queue.pop(0)
        if then is None:
            return {"type": "http.disconnect"}
        return await then()

    return receive


def _nesting(raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    """How deep each byte of the JSON text ``raw`` is nested (after it), and which bytes
    are outside strings."""
    b = np.frombuffer(raw, dtype=np.uint8)
    step = _STEP[b]
    quote = (b == _QUOTE).view(np.uint8)
    if b"\\" in raw:  # a quote after an odd run of backslashes is within its string
        quote = quote.copy()
        at = np.arange(b.size)
        last = np.maximum.accumulate(np.where(b == _BACKSLASH, -1, at))  # last non-\\
        q = np.flatnonzero(quote)
        q = q[q > 0]
        quote[q[(q - 1 - last[q - 1]) % 2 == 1]] = 0
    outside = np.cumsum(quote, dtype=np.uint8)  # the parity of the quotes so far
    outside &= 1
    outside ^= 1
    step *= outside.view(np.int8)
    return np.cumsum(step, dtype=np.int32), outside.view(bool)


def json_depth(raw: bytes) -> int:
    """How deep arrays and objects nest in the JSON text ``raw`` (brackets within strings
    are not counted); 0 for a scalar."""
    return int(_nesting(raw)[0].max(initial=0))


def _deep_member(raw: bytes, most: int) -> str | int | None:
    """The member of the top object (its key) or array (its index) of the JSON text
    ``raw`` in which arrays and objects first nest beyond ``most``; None if they do not,
    or the key is not plain."""
    depth, outside = _nesting(raw)
    beyond = np.flatnonzero(depth > most)
    if beyond.size == 0 or most < 2:
        return None
    first = int(beyond[0])
    rises = np.diff(depth[:first], prepend=0) == 1
    opens = np.flatnonzero(rises & (depth[:first] == 2))  # the top's members, opened
    if opens.size == 0:
        return None
    child = int(opens[-1])
    root = int(np.flatnonzero(depth == 1)[0])
    if raw[root : root + 1] == b"[":
        commas = (np.frombuffer(raw, dtype=np.uint8)[root:child] == ord(",")) & outside[root:child]
        return int((commas & (depth[root:child] == 1)).sum())
    colon = raw.rfind(b":", root, child)
    end = raw.rfind(b'"', root, colon)
    start = raw.rfind(b'"', root, end)
    try:
        key = orjson.loads(raw[start : end + 1])
    except orjson.JSONDecodeError:
        return None
    return key if isinstance(key, str) else None


def _trial_call(path: str) -> bool:
    """Whether ``path`` is a trial call's (read by :mod:`app.http.bodies`)."""
    return path.startswith(_MODELS) and path.endswith(_TRIAL_CALLS)


class BodyLimit:
    """Refuse a body beyond its bounds, before the app reads it: a body with a
    ``Content-Encoding`` (415: bodies are read as sent, never decoded); a body over
    ``max_bytes``, by Content-Length or as it streams in (413); and a body whose arrays
    and objects nest deeper than ``max_depth`` (422).

    The depth of a body is counted before the app reads it when its brackets could nest
    that deep. A trial call's body (many of them in a batch) is read by its own readers,
    which refuse any body that deep as not a trial; their refusal then names the depth.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        max_depth: int = _DEFAULTS["max_json_depth"].default,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_depth = max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = None
        for key, value in scope["headers"]:
            if (
                key == b"content-encoding"
                and value.strip().lower() not in (b"", b"identity")
                and scope["method"] in _BODY_METHODS
            ):
                name = value.decode("latin-1")[:64]
                detail = f"Content-Encoding {name!r}: expected none (a body is read as sent)"
                await answer(send, 415, orjson.dumps({"detail": detail}))
                return
            if key == b"content-length":
                length = value
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await self._too_large(send)
            return
        # read the body up to the limit before the app sees it
        chunks: list[bytes] = []
        seen = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message]), send)
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_bytes:
                await self._too_large(send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        body = {"type": "http.request", "body": raw, "more_body": False}
        if not self._may_nest_too_deep(raw):
            await self.app(scope, _replay([body], receive), send)
        elif _trial_call(scope["path"]):
            await self.app(scope, _replay([body], receive), self._naming_depth(send, raw))
        elif (depth := json_depth(raw)) > self.max_depth:
            await answer(send, 422, self._too_deep(raw, depth))
        else:
            await self.app(scope, _replay([body], receive), send)

    def _may_nest_too_deep(self, raw: bytes) -> bool:
        """False when ``raw`` has too few brackets to nest beyond the limit (most bodies:
        counted in C, without the full count of :func:`json_depth`)."""
        return raw.count(b"[") + raw.count(b"{") > self.max_depth

    def _too_deep(self, raw: bytes, depth: int) -> bytes:
        """A 422 naming the member of the body ``raw`` that nests ``depth`` deep."""
        member = _deep_member(raw, self.max_depth)
        loc = ["body"] if member is None else ["body", member]
        msg = f"the body nests {depth} deep: expected at most {self.max_depth} (max_json_depth)"
        return orjson.dumps({"detail": [{"loc": loc, "msg": msg, "type": "value_error"}]})

    def _naming_depth(self, send: Send, raw: bytes) -> Send:
        """``send``, except that a refusal (400 or 422) of the body ``raw`` nested beyond
        the limit is answered as such, naming its depth."""
        held: list[Message] = []

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] in (400, 422):
                held.append(message)
                return
            if held and message["type"] == "http.response.body":
                held.append(message)
                if message.get("more_body", False):
                    return
                depth = json_depth(raw)
                if depth > self.max_depth:
                    await answer(send, 422, self._too_deep(raw, depth))
                else:
                    for m in held:
                        await send(m)
                held.clear()
                return
            await send(message)

        return sending

    async def _too_large(self, send: Send) -> None:
        body = b'{"detail":"request body too large: expected at most %d bytes"}' % self.max_bytes
        await answer(send, 413, body)


class HeaderLimit:
    """Refuse a request or WebSocket whose header fields are beyond ``max_headers`` or
    ``max_header_bytes`` (431), before anything else reads them (the guard included)."""

    def __init__(
        self,
        app: ASGIApp,
        max_headers: int = _DEFAULTS["max_headers"].default,
        max_header_bytes: int = _DEFAULTS["max_header_bytes"].default,
    ) -> None:
        self.app = app
        self.max_headers = max_headers
        self.max_header_bytes = max_header_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            refusal = self._headers_refused(scope["headers"])
            if refusal:
                await _refuse_early(scope, send, 431, refusal)
                return
        await self.app(scope, receive, send)

    def _headers_refused(self, headers: list[tuple[bytes, bytes]]) -> str:
        """Why ``headers`` are beyond their bounds ('' when they are not)."""
        if len(headers) > self.max_headers:
            return (
                f"{len(headers)} header fields: expected at most {self.max_headers} (max_headers)"
            )
        size = sum(len(k) + len(v) for k, v in headers)
        if size > self.max_header_bytes:
            return (
                f"{size} bytes of header fields: expected at most {self.max_header_bytes} "
                "(max_header_bytes)"
            )
        return ""


async def _refuse_early(scope: Scope, send: Send, status: int, detail: str) -> None:
    """Answer ``status`` before the app sees the request; a WebSocket's handshake gets it
    as an HTTP answer where the server allows, else it is closed (403)."""
    body = orjson.dumps({"detail": detail})
    if scope["type"] == "http":
        await answer(send, status, body)
    elif "websocket.http.response" in scope.get("extensions", {}):
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": detail[:120]})


async def answer(send: Send, status: int, body: bytes, *extra: tuple[bytes, bytes]) -> None:
    """Send a whole JSON answer from plain ASGI middleware."""
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": [*headers, *extra]})
    await send({"type": "http.response.body", "body": body})


class Busy:
    """Answer 503 (JSON, with ``Retry-After``) beyond ``most`` HTTP requests in flight in
    this worker, before reading their bodies: an overloaded worker sheds load at once
    rather than queueing without bound. A request cut by the worker's shutdown is a 503
    too."""

    def __init__(self, app: ASGIApp, most: int) -> None:
        self.app = app
        self.most = most
        self.running = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.running >= self.most:
            body = b'{"detail":"this worker serves %d requests already (max_connections)"}'
            await answer(send, 503, body % self.most, (b"retry-after", b"1"))
            return
        self.running += 1
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            # a stopping worker cut this request (its shutdown_timeout ran out): answer
            # it as unavailable, to be retried on another worker, rather than with a 500
            if started:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            body = b'{"detail":"this worker is stopping: try again"}'
            await answer(send, 503, body, (b"retry-after", b"1"), (b"connection", b"close"))
        finally:
            self.running -= 1
