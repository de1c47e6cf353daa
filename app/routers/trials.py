"""Trials: predict now, label later (exactly once), or learn with a known label."""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import APIRouter

from app.deps import NameDep, ServiceDep, SettingsDep
from app.errors import BadInput
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


@router.post("/predict")
async def predict(name: NameDep, body: PredictCreate, service: ServiceDep) -> PredictPublic:
    """Predict a label; unless ``track`` is false, keep the trial until its label comes."""
    results = await service.predict(name, [(_instance(body), body.trial_id)], track=body.track)
    return PredictPublic(**_one(results))


@router.post("/label")
async def label(name: NameDep, body: LabelCreate, service: ServiceDep) -> LabelPublic:
    """Give a predicted trial its true label: applied exactly once.

    ``mistake`` compares the label with the prediction that was served. The same label
    again returns the same answer and changes nothing; a different one is a 409; an
    unknown or expired trial is a 404.
    """
    return LabelPublic(**_one(await service.label(name, [(body.trial_id, body.label)])))


@router.post("/learn")
async def learn(name: NameDep, body: LearnCreate, service: ServiceDep) -> LearnPublic:
    """One trial whose label is already known: predict, judge and learn at once."""
    return LearnPublic(**_one(await service.learn(name, [(_instance(body), body.label)])))


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
