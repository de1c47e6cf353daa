"""The WebSocket stream, blocking side: :class:`Stream` (see :mod:`committee_client._stream`)."""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from contextlib import ExitStack
from types import TracebackType
from typing import Any

from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from committee_client._calls import encode, predict_item
from committee_client._stream import (
    HANDSHAKE_LOG,
    READERS,
    WINDOW,
    admin_message,
    closed_error,
    messages,
    open_error,
)
from committee_client.errors import CommitteeError, ConnectionFailed
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

__all__ = ["Stream"]


class Stream:
    """Predict, label and learn over one WebSocket; made by ``Client.stream(name)``.

    For one thread at a time. Answers come in the order of the requests; a ``*_many``
    call sends up to ``window`` requests ahead of their answers and returns one
    :class:`~committee_client.types.BatchItem` per item, in order. An answer that does not come
    within ``timeout`` closes the stream (its order could no longer be trusted).
    """

    def __init__(
        self, url: str, headers: Mapping[str, str], timeout: float, window: int = WINDOW
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.url, self.headers, self.timeout, self.window = url, dict(headers), timeout, window
        self._ws: ClientConnection | None = None
        self._ids = itertools.count()
        self._closing = ExitStack()

    def __enter__(self) -> Stream:
        try:
            opening = connect(
                self.url,
                additional_headers=self.headers,
                open_timeout=self.timeout,
                logger=HANDSHAKE_LOG,
            )
            self._ws = self._closing.enter_context(opening)
        except (OSError, TimeoutError, InvalidStatus) as e:
            raise open_error(e) from e
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._closing.close()

    def _open(self) -> ClientConnection:
        if self._ws is None:
            raise CommitteeError(None, "the stream is not open: use `with`")
        return self._ws

    def _send(self, body: dict[str, Any]) -> int:
        request_id = next(self._ids)
        try:
            self._open().send(encode({**body, "id": request_id}).decode())
        except ConnectionClosed as e:
            raise closed_error(e) from e
        return request_id

    def _answer(self, op: str, request_id: int) -> BatchItem[Any]:
        ws = self._open()
        try:
            answer = json.loads(ws.recv(self.timeout))
        except ConnectionClosed as e:
            raise closed_error(e) from e
        except TimeoutError:
            ws.close()
            raise ConnectionFailed(f"no answer within {self.timeout} s", sent=True) from None
        if answer.pop("id", None) != request_id:
            ws.close()
            raise CommitteeError(None, f"answer out of order: expected id {request_id}")
        item: BatchItem[Any] = READERS[op].validate_python(answer)
        return item

    def _one(self, op: str, body: dict[str, Any]) -> Any:
        return self._answer(op, self._send({"op": op, **body})).unwrap()

    def predict(
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
        result: Prediction = self._one("predict", body)
        return result

    def label(self, trial_id: str, label: Label) -> Labelled:
        result: Labelled = self._one("label", {"trial_id": trial_id, "label": label})
        return result

    def learn(self, instance: Instance, label: Label) -> Learned:
        result: Learned = self._one("learn", {"instance": dict(instance), "label": label})
        return result

    def change_experts(
        self, add: Sequence[str] | None = None, retire: Sequence[str] | None = None
    ) -> Model:
        """As ``Client.change_experts`` (an admin key's); the model as it is then."""
        result: Model = self._one("experts", admin_message("experts", add=add, retire=retire))
        return result

    def add_features(self, add: Sequence[str]) -> Model:
        result: Model = self._one("features", admin_message("features", add=add))
        return result

    def add_labels(self, add: Sequence[Label]) -> Model:
        result: Model = self._one("labels", admin_message("labels", add=add))
        return result

    def rollback(self, version: int) -> Model:
        result: Model = self._one("rollback", admin_message("rollback", version=version))
        return result

    def fork_model(
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
        result: Model = self._one("fork", body)
        return result

    def backtest(
        self,
        learner: Mapping[str, Any] | str | Sequence[Mapping[str, Any] | str],
        from_version: int | None = None,
        *,
        points: int = 100,
        wait: float | None = None,
    ) -> Job:
        """As ``Client.backtest``: the job, done or running (follow it with the client's
        ``wait_job``)."""
        body = admin_message(
            "backtest", learner=learner, from_version=from_version, points=points, wait=wait
        )
        result: Job = self._one("backtest", body)
        return result

    def attach_challenger(self, challenger: str, learner: Mapping[str, Any] | str) -> Challengers:
        """As ``Client.attach_challenger``, on this stream's model."""
        spec = {"kind": learner} if isinstance(learner, str) else dict(learner)
        body = admin_message("attach_challenger", name=challenger, learner=spec)
        result: Challengers = self._one("attach_challenger", body)
        return result

    def promote_challenger(self, challenger: str) -> Challengers:
        """As ``Client.promote_challenger``, on this stream's model."""
        body = admin_message("promote_challenger", challenger=challenger)
        result: Challengers = self._one("promote_challenger", body)
        return result

    def retire_challenger(self, challenger: str) -> Challengers:
        """As ``Client.retire_challenger``, on this stream's model; its challengers then."""
        body = admin_message("retire_challenger", challenger=challenger)
        result: Challengers = self._one("retire_challenger", body)
        return result

    def _many(self, op: str, items: Iterable[Any]) -> list[BatchItem[Any]]:
        in_flight: deque[int] = deque()
        out: list[BatchItem[Any]] = []
        for body in messages(op, items):
            if len(in_flight) >= self.window:
                out.append(self._answer(op, in_flight.popleft()))
            in_flight.append(self._send(body))
        while in_flight:
            out.append(self._answer(op, in_flight.popleft()))
        return out

    def predict_many(self, instances: Iterable[Instance]) -> list[BatchItem[Prediction]]:
        """Tracked predictions, pipelined, each with a client-made trial id."""
        return self._many("predict", instances)

    def label_many(self, labels: Iterable[tuple[str, Label]]) -> list[BatchItem[Labelled]]:
        """Labels given as (trial_id, label), pipelined."""
        return self._many("label", labels)

    def learn_many(self, items: Iterable[tuple[Instance, Label]]) -> list[BatchItem[Learned]]:
        """(instance, label) trials learned in order, up to ``window`` in flight."""
        return self._many("learn", items)
