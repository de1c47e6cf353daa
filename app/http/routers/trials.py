"""Trials: predict now, label later (exactly once), or learn with a known label.

Each call is a plain function from (trial calls, model name, raw body) to the answer's
document; the routes below declare them for OpenAPI and serve them, and
:mod:`app.http.fastpath` serves the same functions ahead of the router, since they run
thousands of times a second. Each reads its body with its one definition in
:mod:`app.http.bodies`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any, NotRequired

import orjson
from fastapi import APIRouter, Request, Response
from pydantic import ConfigDict, Field, StrictBool, with_config
from typing_extensions import TypedDict

from app.core.errors import BadInput
from app.core.names import TrialId
from app.http import bodies
from app.http.bodies import Body
from app.http.deps import IdempotencyKeyParam, NameParam
from app.http.error_status import item_error
from app.http.permissions import WRITE, access
from app.http.routers.common import answer, body, check_name, idempotency
from app.http.schemas import BatchPublic, LabelPublic, LearnPublic, PredictPublic
from app.service.trial_calls import NOT_ASKED, Judgement, TrialCalls
from models.explain import TOP_DEFAULT

router = APIRouter(prefix="/v1/models/{name}", tags=["trials"])
# what a key's rate limit runs with a call's item count, before the items are applied
Admit = Callable[[int], Awaitable[None]] | None
# (trial calls, model name, raw body, Idempotency-Key header or None, admit) -> the answer
Handler = Callable[[TrialCalls, str, bytes, str | None, Admit], Awaitable[dict[str, Any]]]
Results = list[dict[str, Any] | Exception]


def _one(results: Results) -> dict[str, Any]:
    r = results[0]
    if isinstance(r, Exception):
        raise r
    return r


def _many(results: Results) -> dict[str, Any]:
    """``{"items": [{"result", "error"}]}``, in order; an error names its item's field.
    A :class:`~app.service.trial_calls.Judgement` is written once, however many items share it."""
    written: dict[int, orjson.Fragment] = {}
    items: list[Any] = []
    for i, r in enumerate(results):
        if type(r) is Judgement:
            item = written.get(id(r))
            if item is None:
                item = written[id(r)] = orjson.Fragment(orjson.dumps({"result": r, "error": None}))
            items.append(item)
        elif isinstance(r, Exception):
            items.append({"result": None, "error": item_error(r, f"items.{i}.")})
        else:
            items.append({"result": r, "error": None})
    return {"items": items}


async def _limit(calls: TrialCalls, n: int, admit: Admit) -> None:
    most = calls.settings.max_batch_items
    if n > most:
        raise BadInput("items", f"{n} items: expected at most {most}")
    if admit is not None:
        await admit(n)


@with_config(
    ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"inputs": [5.1, 3.5, 1.4, 0.2], "trial_id": "flower-1"},
                {"inputs": [5.1, 3.5, 1.4, 0.2], "instance": {"experts": {"cnn": "cat"}}},
            ]
        },
    )
)
class PredictInputsCreate(TypedDict):
    """A predict whose experts with endpoints are asked for their votes (docs/fanout.rst)."""

    inputs: Annotated[
        Any,
        Field(
            description="what the deployed classifiers take: a v2 endpoint's row of numbers, "
            "a json endpoint's body"
        ),
    ]
    instance: NotRequired[
        Annotated[
            bodies.Instance,
            Field(description="features, and votes posted (those experts are not asked)"),
        ]
    ]
    trial_id: NotRequired[
        Annotated[TrialId | None, Field(None, description="your id for this trial, else made up")]
    ]
    track: NotRequired[
        Annotated[StrictBool, Field(True, description="false: only predict, expect no label")]
    ]
    explain: NotRequired[bodies.Explain]
    explain_top: NotRequired[bodies.ExplainTop]


@with_config(
    ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "items": [
                        {"inputs": [5.1, 3.5, 1.4, 0.2], "trial_id": "flower-1"},
                        {"inputs": [6.7, 3.0, 5.2, 2.3], "trial_id": "flower-2"},
                    ]
                }
            ]
        },
    )
)
class PredictInputsBatchCreate(TypedDict):
    """Several predicts, each asking the experts with endpoints with its ``inputs``
    (an item without them is a plain predict): docs/fanout.rst."""

    items: Annotated[list[PredictInputsCreate | bodies.PredictCreate], Field(min_length=1)]
    track: NotRequired[
        Annotated[StrictBool | None, Field(None, description="overrides each item's track")]
    ]


PREDICT = Body(bodies.PredictCreate)
PREDICT_INPUTS = Body(PredictInputsCreate)
PREDICT_INPUTS_BATCH = Body(PredictInputsBatchCreate)
LABEL = Body(bodies.LabelCreate)
LEARN = Body(bodies.LearnCreate)
PREDICT_BATCH = Body(bodies.PredictBatchCreate)
LABEL_BATCH = Body(bodies.LabelBatchCreate)
LEARN_BATCH = Body(bodies.LearnBatchCreate)


def _instance(x: bodies.Instance) -> dict[str, Any]:
    """The instance as the service takes it: without the parts given as null."""
    features, experts = x.get("features"), x.get("experts")
    if experts is None:
        return {} if features is None else {"features": features}
    return {"experts": experts} if features is None else {"features": features, "experts": experts}


_PREDICT_FIELDS = (frozenset({"instance", "trial_id", "track"}), frozenset({"instance"}))
_LEARN_FIELDS = (frozenset({"instance", "label"}), frozenset({"instance", "label"}))


_BATCH_TOP = frozenset({"items"})
_PREDICT_BATCH_TOP = frozenset({"items", "track"})


def _read(
    raw: bytes, body: Body[Any], fields: tuple[frozenset[str], frozenset[str]]
) -> dict[str, Any]:
    """A single trial's body, its instance as the payload the service takes: a fusion
    instance read by :func:`app.http.bodies.read_trial` where it can, else by ``body``."""
    got = bodies.read_trial(raw, *fields)
    if got is not None:
        return got
    b: dict[str, Any] = dict(body.read(raw))
    b["instance"] = _instance(b["instance"])
    return b


def _read_batch(
    raw: bytes,
    body: Body[Any],
    fields: tuple[frozenset[str], frozenset[str]],
    top: frozenset[str],
    most: int,
) -> dict[str, Any]:
    """A batch's body as :func:`_read` reads a single trial's, each item's instance the
    payload the service takes: its items (at most ``most``, else ``body`` answers) read by
    :func:`app.http.bodies.read_batch` in one pass where they can be, else the whole body by
    ``body``."""
    got = bodies.read_batch(raw, *fields, top, most)
    if got is not None:
        items, extras = got
        return {**extras, "items": items}
    b: dict[str, Any] = dict(body.read(raw))
    b["items"] = [{**i, "instance": _instance(i["instance"])} for i in b["items"]]
    return b


def _with_inputs(raw: bytes, batch: bool = False) -> bool:
    """Whether the body ``raw`` has a member ``inputs`` (a batch: one of its items has),
    looked for only when the text has it somewhere."""
    if b'"inputs"' not in raw:
        return False
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    if not isinstance(doc, dict):
        return False
    if not batch:
        return "inputs" in doc
    items = doc.get("items")
    return isinstance(items, list) and any(isinstance(i, dict) and "inputs" in i for i in items)


def _explain(b: Mapping[str, Any]) -> int:
    """How many inputs per label a predict ``b`` asks explained: 0 for none."""
    return int(b.get("explain_top", TOP_DEFAULT)) if b.get("explain", False) else 0


def _explains(items: Sequence[Mapping[str, Any]]) -> list[int] | None:
    """:func:`_explain` of each item of a batch; None when none asks."""
    tops = [_explain(i) for i in items]
    return tops if any(tops) else None


def _track(top: bool | None, items: Sequence[Mapping[str, Any]]) -> bool:
    """A batch's ``track``: its own, else its items' (all alike)."""
    tracks = {i.get("track", True) for i in items} if top is None else {top}
    if len(tracks) > 1:
        raise BadInput("items", "mixed track values: expected all true or all false")
    return tracks.pop()


async def predict_one(
    calls: TrialCalls, name: str, raw: bytes, key: str | None = None, admit: Admit = None
) -> dict[str, Any]:
    check_name(name)
    if _with_inputs(raw):
        f = PREDICT_INPUTS.read(raw)
        await _limit(calls, 1, admit)
        got = await calls.predict_inputs(
            name,
            f["inputs"],
            _instance(f.get("instance") or {}),
            f.get("trial_id"),
            track=f.get("track", True),
            explain=_explain(f),
        )
        return _one([got])
    b = _read(raw, PREDICT, _PREDICT_FIELDS)
    await _limit(calls, 1, admit)
    got = await calls.predict_one(
        name, b["instance"], b.get("trial_id"), track=b.get("track", True), explain=_explain(b)
    )
    return _one([got])


async def label_one(
    calls: TrialCalls, name: str, raw: bytes, key: str | None = None, admit: Admit = None
) -> dict[str, Any]:
    check_name(name)
    b = bodies.read_label(raw) or LABEL.read(raw)
    await _limit(calls, 1, admit)
    return _one([await calls.label_one(name, b["trial_id"], b["label"])])


async def learn_one(
    calls: TrialCalls, name: str, raw: bytes, key: str | None = None, admit: Admit = None
) -> dict[str, Any]:
    check_name(name)
    idem = idempotency(key, "learn", name, raw)
    b = _read(raw, LEARN, _LEARN_FIELDS)
    await _limit(calls, 1, admit)
    return _one([await calls.learn_one(name, b["instance"], b["label"], idem)])


async def predict_many(
    calls: TrialCalls, name: str, raw: bytes, key: str | None = None, admit: Admit = None
) -> dict[str, Any]:
    check_name(name)
    most = calls.settings.max_batch_items
    if _with_inputs(raw, batch=True):
        f = PREDICT_INPUTS_BATCH.read(raw)
        await _limit(calls, len(f["items"]), admit)
        track = _track(f.get("track"), f["items"])
        asked = [
            (
                _instance(i.get("instance") or {}),
                i.get("trial_id"),
                i.get("inputs", NOT_ASKED),
            )
            for i in f["items"]
        ]
        explain = _explains(f["items"])
        return _many(await calls.predict_inputs_many(name, asked, track=track, explain=explain))
    b = _read_batch(raw, PREDICT_BATCH, _PREDICT_FIELDS, _PREDICT_BATCH_TOP, most)
    await _limit(calls, len(b["items"]), admit)
    track = _track(b.get("track"), b["items"])
    items = [(i["instance"], i.get("trial_id")) for i in b["items"]]
    return _many(await calls.predict(name, items, track=track, explain=_explains(b["items"])))


async def label_many(
    calls: TrialCalls, name: str, raw: bytes, key: str | None = None, admit: Admit = None
) -> dict[str, Any]:
    check_name(name)
    b = bodies.read_labels(raw) or LABEL_BATCH.read(raw)
    await _limit(calls, len(b["items"]), admit)
    return _many(await calls.label(name, [(i["trial_id"], i["label"]) for i in b["items"]]))


async def learn_many(
    calls: TrialCalls, name: str, raw: bytes, key: str | None = None, admit: Admit = None
) -> dict[str, Any]:
    check_name(name)
    idem = idempotency(key, "learn/batch", name, raw)
    most = calls.settings.max_batch_items
    b = _read_batch(raw, LEARN_BATCH, _LEARN_FIELDS, _BATCH_TOP, most)
    await _limit(calls, len(b["items"]), admit)
    items = [(i["instance"], i["label"]) for i in b["items"]]
    return _many(await calls.learn(name, items, idem))


# every trial call by its path after /v1/models/{name}/
HANDLERS: dict[str, Handler] = {
    "predict": predict_one,
    "label": label_one,
    "learn": learn_one,
    "predict/batch": predict_many,
    "label/batch": label_many,
    "learn/batch": learn_many,
}


async def _serve(request: Request, call: str) -> Response:
    calls = request.app.state.service.trials
    name = request.path_params["name"]
    key = request.headers.get("idempotency-key")
    admit = request.scope.get("committee.admit")
    return answer(await HANDLERS[call](calls, name, await request.body(), key, admit))


def _either(*kinds: Body[Any]) -> dict[str, Any]:
    """``openapi_extra`` declaring a JSON request body of one of ``kinds``."""
    refs = [body(k)["requestBody"]["content"]["application/json"]["schema"] for k in kinds]
    schema = {"anyOf": refs}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


@router.post(
    "/predict", response_model=PredictPublic, openapi_extra=_either(PREDICT, PREDICT_INPUTS)
)
@access(WRITE, model="name")
async def predict(name: NameParam, request: Request) -> Response:
    """Predict a label; unless ``track`` is false, keep the trial until its label comes.

    With ``inputs``, the service asks the model's experts that have an endpoint for their
    votes itself, waits at most the model's ``deadline_ms``, and answers which experts
    abstained (docs/fanout.rst).

    With ``explain``, the answer's ``explanation`` gives each input's part of each label's
    score, for the learner kinds whose scores are sums over their inputs; other kinds are
    refused with a 422 naming the kind (docs/using.rst, Explanations).
    """
    return await _serve(request, "predict")


@router.post("/label", response_model=LabelPublic, openapi_extra=body(LABEL))
@access(WRITE, model="name")
async def label(name: NameParam, request: Request) -> Response:
    """Give a predicted trial its true label: applied exactly once.

    ``mistake`` compares the label with the prediction that was served. The same label
    again returns the same answer and changes nothing; a different one is a 409; an
    unknown or expired trial is a 404.
    """
    return await _serve(request, "label")


@router.post("/learn", response_model=LearnPublic, openapi_extra=body(LEARN))
@access(WRITE, model="name")
async def learn(name: NameParam, request: Request, key: IdempotencyKeyParam = None) -> Response:
    """One trial whose label is already known: predict, judge and learn at once."""
    return await _serve(request, "learn")


@router.post(
    "/predict/batch",
    response_model=BatchPublic[PredictPublic],
    openapi_extra=_either(PREDICT_BATCH, PREDICT_INPUTS_BATCH),
)
@access(WRITE, model="name")
async def predict_batch(name: NameParam, request: Request) -> Response:
    """Several predictions by the same hypothesis; one result or error per item, in order.

    Items with ``inputs`` ask the experts that have an endpoint for their votes, all
    items at once (docs/fanout.rst); each answer names the experts that abstained.
    """
    return await _serve(request, "predict/batch")


@router.post(
    "/label/batch", response_model=BatchPublic[LabelPublic], openapi_extra=body(LABEL_BATCH)
)
@access(WRITE, model="name")
async def label_batch(name: NameParam, request: Request) -> Response:
    """Several labels, applied in order as one sequence; one result or error per item."""
    return await _serve(request, "label/batch")


@router.post(
    "/learn/batch", response_model=BatchPublic[LearnPublic], openapi_extra=body(LEARN_BATCH)
)
@access(WRITE, model="name")
async def learn_batch(
    name: NameParam, request: Request, key: IdempotencyKeyParam = None
) -> Response:
    """Several trials with known labels, learned in order as one sequence."""
    return await _serve(request, "learn/batch")
