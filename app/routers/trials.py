"""Trials: predict now, label later (exactly once), or learn with a known label."""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import APIRouter, Request, Response

from app.deps import NameDep, ServiceDep, SettingsDep
from app.errors import BadInput
from app.routers._lean import answer, body, check_name, parse
from app.schemas import (
    BatchItem,
    BatchPublic,
    ItemError,
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
from app.status import error_status

router = APIRouter(prefix="/v1/models/{name}", tags=["trials"])
T = TypeVar("T", PredictPublic, LabelPublic, LearnPublic)


def _one(results: list[dict[str, Any] | Exception]) -> dict[str, Any]:
    r = results[0]
    if isinstance(r, Exception):
        raise r
    return r


def _batch(
    cls: type[T], results: list[dict[str, Any] | Exception], field: str = "items"
) -> BatchPublic[T]:
    items: list[BatchItem[T]] = []
    for i, r in enumerate(results):
        if isinstance(r, Exception):
            code, message = error_status(r)
            where = f"{field}.{i}.{r.field}" if isinstance(r, BadInput) else None
            items.append(BatchItem(error=ItemError(status=code, message=message, field=where)))
        else:
            items.append(BatchItem(result=cls(**r)))
    return BatchPublic[cls](items=items)  # type: ignore[valid-type]


def _limit(n: int, settings: SettingsDep) -> None:
    if n > settings.max_batch_items:
        raise BadInput("items", f"{n} items: expected at most {settings.max_batch_items}")


def _instance(body: PredictCreate | LearnCreate) -> dict[str, Any]:
    return body.instance.model_dump(exclude_none=True)


async def predict_one(service: ModelService, name: str, raw: bytes) -> dict[str, Any]:
    check_name(name)
    b = parse(raw, PredictCreate)
    return _one(await service.predict(name, [(_instance(b), b.trial_id)], track=b.track))


async def label_one(service: ModelService, name: str, raw: bytes) -> dict[str, Any]:
    check_name(name)
    b = parse(raw, LabelCreate)
    return _one(await service.label(name, [(b.trial_id, b.label)]))


async def learn_one(service: ModelService, name: str, raw: bytes) -> dict[str, Any]:
    check_name(name)
    b = parse(raw, LearnCreate)
    result = _one(await service.learn(name, [(_instance(b), b.label)]))
    del result["trial_id"]
    return result


# The three calls made once per trial; app.fastpath serves them ahead of the router.
ONE_TRIAL = {"predict": predict_one, "label": label_one, "learn": learn_one}


@router.post("/predict", response_model=PredictPublic, openapi_extra=body(PredictCreate))
async def predict(name: str, request: Request) -> Response:
    """Predict a label; unless ``track`` is false, keep the trial until its label comes."""
    return answer(await predict_one(request.app.state.service, name, await request.body()))


@router.post("/label", response_model=LabelPublic, openapi_extra=body(LabelCreate))
async def label(name: str, request: Request) -> Response:
    """Give a predicted trial its true label: applied exactly once.

    ``mistake`` compares the label with the prediction that was served. The same label
    again returns the same answer and changes nothing; a different one is a 409; an
    unknown or expired trial is a 404.
    """
    return answer(await label_one(request.app.state.service, name, await request.body()))


@router.post("/learn", response_model=LearnPublic, openapi_extra=body(LearnCreate))
async def learn(name: str, request: Request) -> Response:
    """One trial whose label is already known: predict, judge and learn at once."""
    return answer(await learn_one(request.app.state.service, name, await request.body()))


@router.post("/predict/batch")
async def predict_batch(
    name: NameDep, body: PredictBatchCreate, service: ServiceDep, settings: SettingsDep
) -> BatchPublic[PredictPublic]:
    """Several predictions by the same hypothesis; one result or error per item, in order."""
    _limit(len(body.items), settings)
    items = [(_instance(b), b.trial_id) for b in body.items]
    tracks = {b.track for b in body.items} if body.track is None else {body.track}
    if len(tracks) > 1:
        raise BadInput("items", "mixed track values: expected all true or all false")
    results = await service.predict(name, items, track=tracks.pop())
    return _batch(PredictPublic, results)


@router.post("/label/batch")
async def label_batch(
    name: NameDep, body: LabelBatchCreate, service: ServiceDep, settings: SettingsDep
) -> BatchPublic[LabelPublic]:
    """Several labels, applied in order as one sequence; one result or error per item."""
    _limit(len(body.items), settings)
    results = await service.label(name, [(b.trial_id, b.label) for b in body.items])
    return _batch(LabelPublic, results)


@router.post("/learn/batch")
async def learn_batch(
    name: NameDep, body: LearnBatchCreate, service: ServiceDep, settings: SettingsDep
) -> BatchPublic[LearnPublic]:
    """Several trials with known labels, learned in order as one sequence."""
    _limit(len(body.items), settings)
    results = await service.learn(name, [(_instance(b), b.label) for b in body.items])
    return _batch(LearnPublic, results)
