"""The WebSocket stream, asyncio side: :class:`AsyncStream`, and the protocol both streams
share (``WS /v1/models/{name}/stream``).

Each request is one JSON text message ``{"op", "id", ...}`` with the fields of the REST
call of that name; the service answers each, in order, with ``{"id", "result"}`` or
``{"id", "error": {"status", "message", "field"}}``, and closes with code 4404 when the
model does not exist (4401, 4403 and 4429 for the API key: see :func:`closed_error`).
The stream is not retried: a dropped connection fails the requests in flight with
:class:`~committee_client.errors.ConnectionFailed` (``sent`` True), since they may have
been applied.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

from pydantic import TypeAdapter
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from committee_client import _calls as calls
from committee_client._calls import encode, predict_item
from committee_client.errors import CommitteeError, ConnectionFailed, from_response
from committee_client.types import (
    BatchItem,
    Challengers,
    Instance,
    Job,
    Label,
    Labelled,
    Learned,
    Model,
    Prediction,
)

__all__ = ["AsyncStream"]

T = TypeVar("T", Prediction, Labelled, Learned)
REFUSED = 4000  # close code 4000 + s: refused as the HTTP status s would be
RATE_RETRY_AFTER = "1"  # a close frame has no Retry-After; the service never asks less
WINDOW = 256
READERS: dict[str, TypeAdapter[Any]] = {
    op: TypeAdapter(BatchItem[cls])  # type: ignore[valid-type]
    for op, cls in (
        ("predict", Prediction),
        ("label", Labelled),
        ("learn", Learned),
        ("experts", Model),
        ("features", Model),
        ("labels", Model),
        ("rollback", Model),
        ("backtest", Job),
        ("fork", Model),
        ("attach_challenger", Challengers),
        ("promote_challenger", Challengers),
        ("retire_challenger", Challengers),
    )
}


def admin_message(op: str, **fields: Any) -> dict[str, Any]:
    """The body of an admin op (a change of input, a rollback, a backtest), with the
    fields given (None left out), as the REST client sends them."""
    body: dict[str, Any] = {k: v for k, v in fields.items() if v is not None}
    if op == "backtest":
        body["learner"] = calls.backtest("", fields["learner"], None, 100, None).body["learner"]
    for k in ("add", "retire"):
        if k in body:
            body[k] = list(body[k])
    return body


class HandshakeLog(logging.LoggerAdapter[logging.Logger]):
    """websockets' own logger with the value of the ``Authorization`` header (the API
    key) hidden from its debug lines of the handshake (``"> %s: %s"``, name and value).

    The connection wraps it in an adapter of its own, which calls ``log``.
    """

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if len(args) == 2 and str(args[0]).lower() == "authorization":
            args = (args[0], "[hidden]")
        super().log(level, msg, *args, **kwargs)


HANDSHAKE_LOG = HandshakeLog(logging.getLogger("websockets.client"))


def stream_url(base_url: str, name: str) -> str:
    """The stream's ``ws://`` (or ``wss://``) address for an ``http(s)://`` base URL."""
    scheme, _, rest = base_url.rstrip("/").partition("://")
    ws = {"http": "ws", "https": "wss"}.get(scheme, scheme)
    return f"{ws}://{rest}/v1/models/{quote(name, safe='')}/stream"


def messages(op: str, items: Iterable[Any]) -> Iterable[dict[str, Any]]:
    """Request bodies (without ids) for ``op`` from ``predict_many``-style items."""
    for item in items:
        if op == "predict":
            yield {"op": op, **predict_item(item, None, True)}
        elif op == "label":
            yield {"op": op, "trial_id": item[0], "label": item[1]}
        else:
            yield {"op": op, "instance": dict(item[0]), "label": item[1]}


def closed_error(e: ConnectionClosed) -> CommitteeError:
    """Why the stream ended, as the client's error. The service refuses a stream by
    closing it with 4000 + the HTTP status of the refusal: 4401 no valid API key (or it
    was revoked), 4403 the key's scope does not allow the stream, 4404 the model does not
    exist (or is outside the key's models), 4429 the key's request rate."""
    code, reason = (e.rcvd.code, e.rcvd.reason) if e.rcvd is not None else (None, "")
    status = code - REFUSED if code is not None else None
    if status in (401, 403, 404, 429):
        body = {"detail": reason or f"the service refused the stream ({code})"}
        return from_response(status, body, RATE_RETRY_AFTER if status == 429 else None)
    return ConnectionFailed(f"the stream closed: {e}", sent=True)


def open_error(e: Exception) -> CommitteeError:
    """The client's error for a stream that could not be opened."""
    if isinstance(e, InvalidStatus):
        r = e.response
        try:
            body = json.loads(r.body or b"")
        except ValueError:  # not JSON, or not UTF-8
            body = {"detail": (r.body or b"").decode(errors="replace") or r.reason_phrase}
        return from_response(r.status_code, body, r.headers.get("retry-after"))
    return ConnectionFailed(f"{type(e).__name__}: {e}", sent=False)


class AsyncStream:
    """Predict, label and learn over one WebSocket; made by ``AsyncClient.stream(name)``.

    Calls may be awaited from several tasks at once; each gets its own answer. A
    ``*_many`` call keeps up to ``window`` requests in flight and returns one
    :class:`~committee_client.types.BatchItem` per item, in order.
    """

    def __init__(
        self, url: str, headers: Mapping[str, str], timeout: float, window: int = WINDOW
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.url, self.headers, self.timeout, self.window = url, dict(headers), timeout, window
        self._ws: ClientConnection | None = None
        self._ids = itertools.count()
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._ended: CommitteeError | None = None

    async def __aenter__(self) -> AsyncStream:
        try:
            self._ws = await connect(
                self.url,
                additional_headers=self.headers,
                open_timeout=self.timeout,
                logger=HANDSHAKE_LOG,
            )
        except (OSError, TimeoutError, InvalidStatus) as e:
            raise open_error(e) from e
        self._reader = asyncio.create_task(self._read(self._ws))
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            await self._reader

    async def _read(self, ws: ClientConnection) -> None:
        try:
            async for raw in ws:
                answer = json.loads(raw)
                future = self._waiting.pop(answer.get("id"), None)
                if future is not None and not future.done():
                    future.set_result(answer)
            error: CommitteeError = ConnectionFailed("the stream was closed", sent=True)
        except ConnectionClosed as e:
            error = closed_error(e)
        self._ended = error
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(error)
        self._waiting.clear()

    async def _send(self, body: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        if self._ws is None:
            raise CommitteeError(None, "the stream is not open: use `async with`")
        if self._ended is not None:
            raise self._ended
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        try:
            await self._ws.send(encode({**body, "id": request_id}).decode())
        except ConnectionClosed as e:
            self._waiting.pop(request_id, None)
            raise closed_error(e) from e
        return future

    async def _answer(self, op: str, future: asyncio.Future[dict[str, Any]]) -> BatchItem[Any]:
        try:
            answer = await asyncio.wait_for(future, self.timeout)
        except TimeoutError:
            await self.aclose()
            raise ConnectionFailed(f"no answer within {self.timeout} s", sent=True) from None
        answer.pop("id", None)
        item: BatchItem[Any] = READERS[op].validate_python(answer)
        return item

    async def _one(self, op: str, body: dict[str, Any]) -> Any:
        return (await self._answer(op, await self._send({"op": op, **body}))).unwrap()

    async def predict(
        self,
        instance: Instance,
        *,
        trial_id: str | None = None,
        track: bool = True,
        explain: bool = False,
        explain_top: int | None = None,
    ) -> Prediction:
        """As ``Client.predict``: a tracked prediction gets a client-made trial id."""
        body = predict_item(instance, trial_id, track, explain, explain_top)
        result: Prediction = await self._one("predict", body)
        return result

    async def label(self, trial_id: str, label: Label) -> Labelled:
        result: Labelled = await self._one("label", {"trial_id": trial_id, "label": label})
        return result

    async def learn(self, instance: Instance, label: Label) -> Learned:
        result: Learned = await self._one("learn", {"instance": dict(instance), "label": label})
        return result

    async def change_experts(
        self, add: Sequence[str] | None = None, retire: Sequence[str] | None = None
    ) -> Model:
        """As ``Client.change_experts`` (an admin key's); the model as it is then."""
        result: Model = await self._one("experts", admin_message("experts", add=add, retire=retire))
        return result

    async def add_features(self, add: Sequence[str]) -> Model:
        result: Model = await self._one("features", admin_message("features", add=add))
        return result

    async def add_labels(self, add: Sequence[Label]) -> Model:
        result: Model = await self._one("labels", admin_message("labels", add=add))
        return result

    async def rollback(self, version: int) -> Model:
        result: Model = await self._one("rollback", admin_message("rollback", version=version))
        return result

    async def fork_model(
        self,
        name: str,
        version: int | None = None,
        *,
        learner: Mapping[str, Any] | str | None = None,
        label_ttl: float | None = None,
    ) -> Model:
        """As ``Client.fork_model``, from this stream's model: model ``name`` made from its
        state at ``version`` (None: now), or ``learner`` trained on its log up to there."""
        spec = {"kind": learner} if isinstance(learner, str) else learner
        body = admin_message("fork", name=name, version=version, learner=spec, label_ttl=label_ttl)
        result: Model = await self._one("fork", body)
        return result

    async def backtest(
        self,
        learner: Mapping[str, Any] | str | Sequence[Mapping[str, Any] | str],
        from_version: int | None = None,
        *,
        points: int = 100,
        wait: float | None = None,
    ) -> Job:
        """As ``Client.backtest``: the job, done or running (follow it with the REST
        client's ``wait_job``)."""
        body = admin_message(
            "backtest", learner=learner, from_version=from_version, points=points, wait=wait
        )
        result: Job = await self._one("backtest", body)
        return result

    async def attach_challenger(
        self, challenger: str, learner: Mapping[str, Any] | str
    ) -> Challengers:
        """As ``Client.attach_challenger``, on this stream's model."""
        spec = {"kind": learner} if isinstance(learner, str) else dict(learner)
        body = admin_message("attach_challenger", name=challenger, learner=spec)
        result: Challengers = await self._one("attach_challenger", body)
        return result

    async def promote_challenger(self, challenger: str) -> Challengers:
        """As ``Client.promote_challenger``, on this stream's model."""
        body = admin_message("promote_challenger", challenger=challenger)
        result: Challengers = await self._one("promote_challenger", body)
        return result

    async def retire_challenger(self, challenger: str) -> Challengers:
        """As ``Client.retire_challenger``, on this stream's model; its challengers then."""
        body = admin_message("retire_challenger", challenger=challenger)
        result: Challengers = await self._one("retire_challenger", body)
        return result

    async def _many(self, op: str, items: Iterable[Any]) -> list[BatchItem[Any]]:
        room = asyncio.Semaphore(self.window)
        futures: list[asyncio.Future[dict[str, Any]]] = []
        for body in messages(op, items):
            await room.acquire()
            future = await self._send(body)
            future.add_done_callback(lambda _: room.release())
            futures.append(future)
        return [await self._answer(op, f) for f in futures]

    async def predict_many(self, instances: Iterable[Instance]) -> list[BatchItem[Prediction]]:
        """Tracked predictions, pipelined, each with a client-made trial id."""
        return await self._many("predict", instances)

    async def label_many(self, labels: Iterable[tuple[str, Label]]) -> list[BatchItem[Labelled]]:
        """Labels given as (trial_id, label), pipelined."""
        return await self._many("label", labels)

    async def learn_many(self, items: Iterable[tuple[Instance, Label]]) -> list[BatchItem[Learned]]:
        """(instance, label) trials learned in order, up to ``window`` in flight."""
        return await self._many("learn", items)
