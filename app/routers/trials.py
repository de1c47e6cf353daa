"""Trials: predict now, label later (exactly once), or learn with a known label.

Each call is a plain function from (service, model name, raw body) to the answer's
document; the routes below declare them for OpenAPI and serve them, and
:mod:`app.fastpath` serves the same functions ahead of the router, since they run
thousands of times a second.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response

from app.deps import IdempotencyKeyDep, NameDep
from app.errors import BadInput
from app.routers._lean import answer, body, check_name, idempotency, parse
from app.schemas import (
    BatchPublic,
    Instance,
    LabelBatchCreate,
    LabelCreate,
    LabelPublic,
    LearnBatchCreate,
    LearnCreate,
    LearnPublic,
    PredictBatchCreate,
    PredictCreate,
    PredictPublic,
)
from app.service import ModelService
from app.status import item_error

router = APIRouter(prefix="/v1/models/{name}", tags=["trials"])
# (service, model name, raw body, Idempotency-Key header or None) -> the answer
Handler = Callable[[ModelService, str, bytes, str | None], Awaitable[dict[str, Any]]]
Results = list[dict[str, Any] | Exception]


def _one(results: Results) -> dict[str, Any]:
    r = results[0]
    if isinstance(r, Exception):
        raise r
    return r


def _many(results: Results) -> dict[str, Any]:
    """``{"items": [{"result", "error"}]}``, in order; an error names its item's field."""
    return {
        "items": [
            {"result": None, "error": item_error(r, f"items.{i}.")}
            if isinstance(r, Exception)
            else {"result": r, "error": None}
            for i, r in enumerate(results)
        ]
    }


def _limit(service: ModelService, n: int) -> None:
    most = service.settings.max_batch_items
    if n > most:
        raise BadInput("items", f"{n} items: expected at most {most}")


def _instance(x: Instance) -> dict[str, Any]:
    out = {}
    if x.features is not None:
        out["features"] = x.features
    if x.experts is not None:
        out["experts"] = x.experts
    return out


async def predict_one(
    service: ModelService, name: str, raw: bytes, key: str | None = None
) -> dict[str, Any]:
    check_name(name)
    b = parse(raw, PredictCreate)
    return _one(await service.predict(name, [(_instance(b.instance), b.trial_id)], track=b.track))


async def label_one(
    service: ModelService, name: str, raw: bytes, key: str | None = None
) -> dict[str, Any]:
    check_name(name)
    b = parse(raw, LabelCreate)
    return _one(await service.label(name, [(b.trial_id, b.label)]))


async def learn_one(
    service: ModelService, name: str, raw: bytes, key: str | None = None
) -> dict[str, Any]:
    check_name(name)
    idem = idempotency(key, "learn", name, raw)
    b = parse(raw, LearnCreate)
    return _one(await service.learn(name, [(_instance(b.instance), b.label)], idem))


async def predict_many(
    service: ModelService, name: str, raw: bytes, key: str | None = None
) -> dict[str, Any]:
    check_name(name)
    b = parse(raw, PredictBatchCreate)
    _limit(service, len(b.items))
    tracks = {i.track for i in b.items} if b.track is None else {b.track}
    if len(tracks) > 1:
        raise BadInput("items", "mixed track values: expected all true or all false")
    items = [(_instance(i.instance), i.trial_id) for i in b.items]
    return _many(await service.predict(name, items, track=tracks.pop()))


async def label_many(
    service: ModelService, name: str, raw: bytes, key: str | None = None
) -> dict[str, Any]:
    check_name(name)
    b = parse(raw, LabelBatchCreate)
    _limit(service, len(b.items))
    return _many(await service.label(name, [(i.trial_id, i.label) for i in b.items]))


_PLAIN_FEATURES = (dict, list, type(None))


def _plain_learn_items(raw: bytes) -> list[tuple[dict[str, Any], Any]] | None:
    """The items of a learn batch read by orjson, when the body plainly has the shape
    :class:`LearnBatchCreate` takes (each item as :func:`_instance` would give it); None
    to let pydantic read it, and judge it with FastAPI's errors."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    items = doc.get("items") if type(doc) is dict and len(doc) == 1 else None
    if type(items) is not list or not items:
        return None
    out = []
    for item in items:
        if type(item) is not dict or len(item) != 2:
            return None
        x, label = item.get("instance"), item.get("label")
        if type(x) is not dict or type(label) not in (str, int):  # no bool, no float
            return None
        # Experts and other odd features go to pydantic: orjson reads an integer beyond
        # 64 bits as a float, which an error message would show otherwise.
        features = x.get("features")
        if (
            len(x) != ("features" in x) + ("experts" in x)
            or x.get("experts") is not None
            or type(features) not in _PLAIN_FEATURES
        ):
            return None
        if len(x) != 1 or features is None:  # drop nulls, as _instance does
            x = {} if features is None else {"features": features}
        out.append((x, label))
    return out


async def learn_many(
    service: ModelService, name: str, raw: bytes, key: str | None = None
) -> dict[str, Any]:
    check_name(name)
    idem = idempotency(key, "learn/batch", name, raw)
    items = _plain_learn_items(raw)
    if items is None:
        b = parse(raw, LearnBatchCreate)
        items = [(_instance(i.instance), i.label) for i in b.items]
    _limit(service, len(items))
    return _many(await service.learn(name, items, idem))


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
    service = request.app.state.service
    name = request.path_params["name"]
    key = request.headers.get("idempotency-key")
    return answer(await HANDLERS[call](service, name, await request.body(), key))


@router.post("/predict", response_model=PredictPublic, openapi_extra=body(PredictCreate))
async def predict(name: NameDep, request: Request) -> Response:
    """Predict a label; unless ``track`` is false, keep the trial until its label comes."""
    return await _serve(request, "predict")


@router.post("/label", response_model=LabelPublic, openapi_extra=body(LabelCreate))
async def label(name: NameDep, request: Request) -> Response:
    """Give a predicted trial its true label: applied exactly once.

    ``mistake`` compares the label with the prediction that was served. The same label
    again returns the same answer and changes nothing; a different one is a 409; an
    unknown or expired trial is a 404.
    """
    return await _serve(request, "label")


@router.post("/learn", response_model=LearnPublic, openapi_extra=body(LearnCreate))
async def learn(name: NameDep, request: Request, key: IdempotencyKeyDep = None) -> Response:
    """One trial whose label is already known: predict, judge and learn at once."""
    return await _serve(request, "learn")


@router.post(
    "/predict/batch",
    response_model=BatchPublic[PredictPublic],
    openapi_extra=body(PredictBatchCreate),
)
async def predict_batch(name: NameDep, request: Request) -> Response:
    """Several predictions by the same hypothesis; one result or error per item, in order."""
    return await _serve(request, "predict/batch")


@router.post(
    "/label/batch", response_model=BatchPublic[LabelPublic], openapi_extra=body(LabelBatchCreate)
)
async def label_batch(name: NameDep, request: Request) -> Response:
    """Several labels, applied in order as one sequence; one result or error per item."""
    return await _serve(request, "label/batch")


@router.post(
    "/learn/batch", response_model=BatchPublic[LearnPublic], openapi_extra=body(LearnBatchCreate)
)
async def learn_batch(name: NameDep, request: Request, key: IdempotencyKeyDep = None) -> Response:
    """Several trials with known labels, learned in order as one sequence."""
    return await _serve(request, "learn/batch")
