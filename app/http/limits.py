"""Plain ASGI middleware bounding a worker's requests: a body size limit (413 beyond it),
a cap on requests in flight (503), and a 503 for requests cut by a worker's shutdown."""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send


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


class BodyLimit:
    """Refuse bodies over ``max_bytes``, by Content-Length or as they stream in."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for key, value in scope["headers"]:
            if key == b"content-length":
                if not value.isdigit() or int(value) > self.max_bytes:
                    await self._refuse(send)
                    return
                await self.app(scope, receive, send)
                return
        # no length given: read the body up to the limit before the app sees it
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
                await self._refuse(send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, _replay([body], receive), send)

    async def _refuse(self, send: Send) -> None:
        body = b'{"detail":"request body too large: expected at most %d bytes"}' % self.max_bytes
        await answer(send, 413, body)


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
