"""``WS /v1/models/{name}/stream``: predict, label and learn over one connection, and the
admin operations on the model.

Each text message is one JSON request, ``{"op": ..., "id": ..., ...}``, with the fields
of the REST call of that name: ``predict``, ``label``, ``learn``; the changes of input
``experts``, ``features`` and ``labels`` (``add``, ``retire``); ``rollback``
(``version``); ``backtest`` (``learner``, ``from_version``, ``points``, ``wait``); and
``fork``, which makes model ``name`` from this one at ``version`` (``learner``,
``label_ttl`` and ``max_active`` as ``POST /v1/models`` takes them); the shadow
challengers' ``attach_challenger`` (``name``, ``learner``), ``promote_challenger`` and
``retire_challenger`` (``challenger``), answered with the model's challengers. Writes may carry an
``idempotency_key``. Each request gets one answer, in order,
``{"id": ..., "result": {...}}`` or ``{"id": ..., "error": {"status", "message",
"field"}}``. A bad message gets an error and the stream goes on. An unknown model closes
the stream with code 4404.

Requests queued together are applied together: consecutive ones of the same op become
one batch call (one Redis round trip), in order. At most ``ws_max_queued`` requests are
read ahead of the answers; beyond that the server stops reading and TCP flow control
holds the producer back. A learn may carry an ``idempotency_key``: sent again with the
same key and request, it gets the first answer and is not learned twice.

While auth is on, the handshake needs a write key (``Authorization: Bearer``): without
one the stream is closed with 4401, 4403 for a read key, 4404 for a model outside the
key's tenancy, and 4401 as soon as the key is revoked. Each request is a trial of the
key's rate limit; one over it is answered with a 429 error and the stream goes on. A
admin operation needs an admin key (a 403 error otherwise) and is audited as its REST
call is; a fork stays within the key's models and quota, and a backtest is answered with
its job (follow a running one with ``GET /v1/jobs/{id}``).

Limits (settings): a message over ``ws_max_message_bytes`` closes the stream with 1009,
more than ``ws_max_connections`` streams per worker are closed at once with 1013, and a
stream silent for ``ws_idle_timeout`` seconds is closed with 1001.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson
from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ValidationError

from app.core.errors import BadInput, Forbidden
from app.http.bodies import read_trial
from app.http.error_status import error_status, item_error
from app.http.permissions import WRITE, access
from app.http.routers.common import idempotency
from app.http.routers.models import make_model, public
from app.http.routers.trials import Admit
from app.http.schemas import (
    EXACT_FLOATS,
    BacktestCreate,
    ChallengerCreate,
    ChallengerRef,
    ChallengersPublic,
    ExpertsChange,
    FeaturesChange,
    JobPublic,
    LabelsChange,
    ModelFork,
    Rollback,
)
from app.service.access import Auth, Principal, principal_of
from app.service.model_service import ModelService
from app.service.trial_calls import NOT_ASKED
from models.explain import TOP_DEFAULT, TOP_MOST
from storage.errors import ModelNotFound
from storage.keys import NAME_PATTERN, TRIAL_ID_PATTERN, valid_name, valid_trial_id
from storage.repository import Idempotency

router = APIRouter(tags=["stream"])
log = logging.getLogger("committee.stream")

BATCH = 512  # requests applied in one call at most
_FIELDS = {
    "predict": (set(), {"instance", "inputs", "trial_id", "track", "explain", "explain_top"}),
    "label": ({"trial_id", "label"}, set()),
    "learn": ({"instance", "label"}, {"idempotency_key"}),
    "experts": (set(), {"add", "retire", "idempotency_key"}),
    "features": ({"add"}, {"idempotency_key"}),
    "labels": ({"add"}, {"idempotency_key"}),
    "rollback": ({"version"}, {"idempotency_key"}),
    "backtest": ({"learner"}, {"from_version", "points", "wait", "idempotency_key"}),
    "fork": ({"name"}, {"version", "learner", "label_ttl", "max_active", "idempotency_key"}),
    "attach_challenger": ({"name", "learner"}, {"idempotency_key"}),
    "promote_challenger": ({"challenger"}, {"idempotency_key"}),
    "retire_challenger": ({"challenger"}, {"idempotency_key"}),
}
#: the admin operations, each with its body's schema and its audit action
_CHANGES: dict[str, tuple[type[BaseModel], str]] = {
    "experts": (ExpertsChange, "change experts"),
    "features": (FeaturesChange, "add features"),
    "labels": (LabelsChange, "add labels"),
    "rollback": (Rollback, "roll back"),
    "backtest": (BacktestCreate, "backtest"),
    "fork": (ModelFork, "create model"),
    "attach_challenger": (ChallengerCreate, "attach challenger"),
    "promote_challenger": (ChallengerRef, "promote challenger"),
    "retire_challenger": (ChallengerRef, "retire challenger"),
}
# the messages read by app.http.bodies.read_trial when they can be: their members
_PLAIN_OPS = {
    "predict": frozenset({"op", "id", "instance", "trial_id", "track"}),
    "learn": frozenset({"op", "id", "instance", "label"}),
}
_PLAIN_FIELDS = _PLAIN_OPS["predict"] | _PLAIN_OPS["learn"]
_PLAIN_REQUIRED = frozenset({"op", "instance"})
_END = object()
_INT64 = 2**63


class Request:
    __slots__ = ("args", "error", "explain", "id", "idem", "inputs", "key", "op")

    def __init__(self, raw: str | bytes, name: str = "", most_label: int = 256) -> None:
        self.id: Any = None
        self.op = ""
        # (op, track, explained): requests applied together share it
        self.key: tuple[str, Any, bool] = ("", None, False)
        self.args: tuple[Any, Any] = (None, None)
        self.idem: Idempotency | None = None
        self.inputs: Any = NOT_ASKED  # a predict's, for the experts with endpoints
        self.explain = 0  # a predict's: the inputs its answer explains per label
        self.error: BadInput | None = None
        try:
            self._parse(raw, name, most_label)
        except BadInput as e:
            self.error = e

    def _plain(self, raw: str | bytes, most_label: int) -> bool:
        """Read a predict or learn message whose instance is ``{"experts": {...}}`` alone
        and whose members are plainly well formed, its votes left as text (see
        :func:`app.http.bodies.read_trial`); False when it is not such a message."""
        text = raw.encode() if isinstance(raw, str) else raw
        msg = read_trial(text, _PLAIN_FIELDS, _PLAIN_REQUIRED)
        if msg is None:
            return False
        op, label = msg["op"], msg.get("label")
        if op not in _PLAIN_OPS or not _PLAIN_OPS[op] >= msg.keys():
            return False
        if op == "learn":
            label = _label_of(label, most_label)
            if label is None:
                return False
        self.id, self.op = msg.get("id"), op
        self.key = (op, msg.get("track", True), False)
        if op == "predict":
            self.args = (msg["instance"], msg.get("trial_id"))
        else:
            self.args = (msg["instance"], label)
        return True

    def _parse(self, raw: str | bytes, name: str, most_label: int) -> None:
        if self._plain(raw, most_label):
            return
        try:
            msg = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise BadInput("message", f"not JSON: {e}") from None
        if not isinstance(msg, dict):
            raise BadInput("message", "expected a JSON object")
        self.id = msg.get("id")
        if not _plain_id(self.id):
            self.id = None
            raise BadInput("id", "expected a string of at most 256 characters, a number or null")
        op = msg.get("op")
        if op not in _FIELDS:
            raise BadInput("op", f"{op!r}: expected one of {', '.join(map(repr, _FIELDS))}")
        need, optional = _FIELDS[op]
        for f in need - msg.keys():
            raise BadInput(f, f"missing: {op} needs {', '.join(sorted(need))}")
        for f in msg.keys() - need - optional - {"op", "id"}:
            raise BadInput(f, f"unknown field for {op}")
        if op == "predict" and "instance" not in msg and "inputs" not in msg:
            raise BadInput("instance", "missing: predict needs instance, or inputs")
        if "instance" in msg and not isinstance(msg["instance"], dict):
            raise BadInput("instance", "expected an object with features and/or experts")
        if "inputs" in msg and not isinstance(msg.get("instance", {}).get("experts") or {}, dict):
            raise BadInput("instance.experts", "expected an object {expert: vote}")
        label = msg.get("label")
        if "label" in need and (label := _label_of(label, most_label)) is None:
            raise BadInput(
                "label",
                f"expected a string of at most {most_label} characters or a 64-bit integer",
            )
        trial_id = msg.get("trial_id")
        if trial_id is not None and not valid_trial_id(trial_id):
            raise BadInput("trial_id", f"{str(trial_id)[:80]!r}: expected {TRIAL_ID_PATTERN}")
        key = msg.get("idempotency_key")
        change = None
        if op in _CHANGES:
            body = {f: msg[f] for f in msg.keys() - {"op", "id", "idempotency_key"}}
            if op == "fork":  # of this stream's model
                body["from"] = {"model": name, "version": body.pop("version", None)}
            try:
                checked = _CHANGES[op][0].model_validate(body)
                change = checked.model_dump(exclude_none=True, by_alias=True)
            except ValidationError as e:
                err = e.errors()[0]
                field = ".".join(str(p) for p in err["loc"]) or op
                if op == "fork":  # the message gives the source's version at its top level
                    field = field.removeprefix("from.")
                raise BadInput(field, err["msg"]) from None
        if key is not None:
            if not isinstance(key, str):
                raise BadInput("idempotency_key", "expected a string")
            # the request without its id: a retry may number its messages anew
            what = orjson.dumps(
                change if change is not None else [msg["instance"], label],
                option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
            )
            try:
                self.idem = idempotency(key, "learn" if change is None else op, name, what)
            except BadInput as e:
                raise BadInput("idempotency_key", e.message) from None
        track = msg.get("track", True)
        if not isinstance(track, bool):
            raise BadInput("track", "expected true or false")
        self.explain = _explain_of(msg)
        self.op = op
        self.key = (op, track, self.explain > 0)
        if op == "predict":
            self.args = (msg.get("instance") or {}, trial_id)
            self.inputs = msg.get("inputs", NOT_ASKED)
        elif op == "label":
            self.args = (trial_id, label)
        elif change is not None:
            self.args = (change, None)
        else:
            self.args = (msg["instance"], label)


def _explain_of(msg: dict[str, Any]) -> int:
    """How many inputs per label a predict message asks explained (0: none), as the REST
    call reads ``explain`` and ``explain_top``."""
    explain, top = msg.get("explain", False), msg.get("explain_top", TOP_DEFAULT)
    if not isinstance(explain, bool):
        raise BadInput("explain", "expected true or false")
    if type(top) is not int or not 1 <= top <= TOP_MOST:
        raise BadInput("explain_top", f"expected an integer from 1 to {TOP_MOST}")
    return top if explain else 0


def _plain_id(v: Any) -> bool:
    if isinstance(v, str):
        return len(v) <= 256
    return (
        v is None or isinstance(v, bool | float) or (isinstance(v, int) and -_INT64 <= v < _INT64)
    )


def _label_of(v: Any, most: int) -> str | int | None:
    """``v`` as a label: a string of at most ``most`` characters, or a 64-bit integer (2.0
    is 2, as for the REST calls: :data:`app.http.schemas.AS_INT`); None if it is neither."""
    if isinstance(v, str):
        return v if len(v) <= most else None
    if type(v) is float and v.is_integer() and abs(v) <= EXACT_FLOATS:
        v = int(v)
    if isinstance(v, int) and not isinstance(v, bool) and -_INT64 <= v < _INT64:
        return v
    return None


def _error(request_id: Any, e: Exception) -> bytes:
    return orjson.dumps({"id": request_id, "error": item_error(e)})


def _result(request_id: Any, result: dict[str, Any]) -> bytes:
    return orjson.dumps({"id": request_id, "result": result})


async def _apply(
    service: ModelService,
    name: str,
    group: list[Request],
    admit: Admit = None,
    who: tuple[Principal, Auth] | None = None,
) -> tuple[list[bytes], bool]:
    """The answers to a group of requests of one op, and whether the model is gone."""
    op, track, explained = group[0].key
    args = [r.args for r in group]
    explain = [r.explain for r in group] if explained else None
    try:
        if admit is not None:  # every request of a stream is a trial of the key's limit
            await admit(len(group))
        if op in _CHANGES:
            assert who is not None
            changed = [await _change(service, name, r, *who) for r in group]
            return [f for f, _ in changed], any(gone for _, gone in changed)
        if op == "predict" and any(r.inputs is not NOT_ASKED for r in group):
            asked = [(r.args[0], r.args[1], r.inputs) for r in group]
            results = await service.trials.predict_inputs_many(
                name, asked, track=track, explain=explain
            )
        elif op == "predict":
            results = await service.trials.predict(name, args, track=track, explain=explain)
        elif op == "label":
            results = await service.trials.label(name, args)
        else:
            results = await _learn(service, name, group)
    except Exception as e:  # answered per request; the stream goes on
        if error_status(e)[0] == 500:
            log.exception("stream of model %s: %s", name, e)
        return [_error(r.id, e) for r in group], isinstance(e, ModelNotFound)
    frames = [
        _error(r.id, res) if isinstance(res, Exception) else _result(r.id, res)
        for r, res in zip(group, results, strict=True)
    ]
    return frames, False


async def _change(
    service: ModelService, name: str, r: Request, principal: Principal, auth: Auth
) -> tuple[bytes, bool]:
    """An admin operation (a change of the model's input, a rollback, a fork, a
    backtest), as its REST call makes it: an admin key's, audited; the answer, and
    whether the model is gone."""
    action = _CHANGES[r.op][1]
    target = r.args[0]["name"] if r.op == "fork" else name
    if not principal.may("admin"):
        e = Forbidden(f"op {r.op!r} is an admin operation: it needs an admin key")
        await auth.audit(principal, f"denied stream {r.op}", name, 403, str(e))
        return _error(r.id, e), False
    body = r.args[0]
    try:
        if r.op == "fork":
            fork = ModelFork.model_validate(body)
            answer = (await make_model(service, auth, principal, fork, r.idem)).model_dump()
        elif r.op == "backtest":
            learner = body["learner"]
            doc = await service.backtests.start(
                name,
                learner if isinstance(learner, list) else [learner],
                body.get("from_version"),
                points=body["points"],
                wait=body.get("wait"),
                idem=r.idem,
            )
            answer = JobPublic(**doc).model_dump()
        elif r.op.endswith("_challenger"):
            ch = service.challengers
            if r.op == "attach_challenger":
                await ch.attach(name, body["name"], body["learner"], r.idem)
            elif r.op == "promote_challenger":
                await ch.promote(name, body["challenger"], r.idem)
            else:
                await ch.retire(name, body["challenger"], r.idem)
            answer = ChallengersPublic(**await ch.read(name)).model_dump()
        else:
            if r.op == "rollback":
                await service.rollback(name, body["version"], r.idem)
            else:
                await service.change_input(name, {r.op: body}, r.idem)
            answer = public(await service.store.read(name)).model_dump()
    except Exception as e:
        status = error_status(e)[0]
        if status == 500:
            log.exception("stream of model %s: %s", name, e)
        await auth.audit(principal, action, target, status, f"stream: {e}"[:200])
        return _error(r.id, e), isinstance(e, ModelNotFound)
    await auth.audit(principal, action, target, 200, "stream")
    return _result(r.id, answer), False


async def _learn(service: ModelService, name: str, group: list[Request]) -> list[Any]:
    """Learn requests in one call: each keyed one its own group, unkeyed runs together."""
    requests: list[tuple[Idempotency | None, list[tuple[Any, Any]]]] = []
    for r in group:
        if r.idem is None and requests and requests[-1][0] is None:
            requests[-1][1].append(r.args)
        else:
            requests.append((r.idem, [r.args]))
    return [res for out in await service.trials.learn_groups(name, requests) for res in out]


class Closing(Exception):
    """The server closes the stream: ``code`` and ``reason`` say why."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


async def _read(ws: WebSocket, queue: asyncio.Queue[Any], service: ModelService) -> None:
    s = service.settings
    try:
        while True:
            try:
                async with asyncio.timeout(s.ws_idle_timeout):  # no task per message
                    message = await ws.receive()
            except TimeoutError:
                raise Closing(1001, f"idle for {s.ws_idle_timeout:g} s (ws_idle_timeout)") from None
            if message["type"] == "websocket.disconnect":
                break
            raw = message.get("text")
            if raw is None:
                raw = message.get("bytes") or b""
            if len(raw) > s.ws_max_message_bytes:
                raise Closing(
                    1009, f"a message over {s.ws_max_message_bytes} bytes (ws_max_message_bytes)"
                )
            await queue.put(raw)  # read by the serving loop, a batch at a time
    except Closing as e:
        await queue.put(e)
    finally:
        await queue.put(_END)


@router.websocket("/v1/models/{name}/stream")
@access(WRITE, model="name")
async def stream(ws: WebSocket, name: str) -> None:
    service: ModelService = ws.app.state.service
    s = service.settings
    if service.streams >= s.ws_max_connections:
        most = s.ws_max_connections
        await ws.accept()
        await ws.close(code=1013, reason=f"{most} streams are open here (ws_max_connections)")
        return
    service.streams += 1  # before the handshake ends, so the count never lags a client
    try:
        await ws.accept()
        await _serve(ws, name, service)
    finally:
        service.streams -= 1


async def _serve(ws: WebSocket, name: str, service: ModelService) -> None:
    auth: Auth = ws.app.state.auth
    key = principal_of(ws.scope).key
    admit: Admit = ws.scope.get("committee.admit")
    # a group is one take of the key's trials: never more than its bucket holds
    most = BATCH if key is None else max(1, min(BATCH, auth.limiter.most(key, "trials")))
    if not valid_name(name):
        await ws.close(code=4404, reason=f"not a model name: expected {NAME_PATTERN}")
        return
    try:
        await service.replicas.live(name)
    except ModelNotFound as e:
        await ws.close(code=4404, reason=str(e))
        return
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=service.settings.ws_max_queued)
    reader = asyncio.create_task(_read(ws, queue, service))
    limit = service.settings.max_label_length
    closing: Closing | None = None
    try:
        done = False
        while not done:
            raws = [await queue.get()]
            while len(raws) < BATCH and not queue.empty():
                raws.append(queue.get_nowait())
            while raws and (raws[-1] is _END or isinstance(raws[-1], Closing)):
                last = raws.pop()
                closing = last if isinstance(last, Closing) else closing
                done = True
            batch = [Request(raw, name, limit) for raw in raws]
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
                while (
                    j < len(batch)
                    and j - i < most
                    and batch[j].error is None
                    and batch[j].key == r.key
                ):
                    j += 1
                if key is not None and not auth.keyring.current(key):
                    await ws.close(code=4401, reason="the API key was revoked")
                    return
                who = (principal_of(ws.scope), auth)
                frames, gone = await _apply(service, name, batch[i:j], admit, who)
                out += frames
                i = j
                if gone:
                    break
            for frame in out:
                await ws.send_text(frame.decode())
            if gone:
                await ws.close(code=4404, reason=f"model {name!r} does not exist")
                return
        if closing is not None:
            await ws.close(code=closing.code, reason=closing.reason)
    except WebSocketDisconnect:
        pass
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
            await reader
