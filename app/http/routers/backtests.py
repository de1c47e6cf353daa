"""Backtests and the jobs that run them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Request, Response, status

from app.http.deps import IdempotencyKeyDep, NameDep, ServiceDep
from app.http.permissions import ADMIN, READ, access
from app.http.routers.common import idempotency
from app.http.schemas import BacktestCreate, JobPublic
from app.service.access import principal_of
from storage.keys import JOB_ID_PATTERN

router = APIRouter(prefix="/v1", tags=["jobs"])

JobIdDep = Annotated[
    str, Path(pattern=JOB_ID_PATTERN, description="a job's id", examples=["0" * 32])
]


def _answer(doc: dict[str, Any], response: Response) -> JobPublic:
    if doc["status"] == "running":
        response.status_code = status.HTTP_202_ACCEPTED
        response.headers["Location"] = f"/v1/jobs/{doc['id']}"
    return JobPublic(**doc)


_RUNNING: dict[int | str, dict[str, Any]] = {
    202: {"model": JobPublic, "description": "the job, still running (see Location)"}
}


@router.post("/models/{name}/backtest", tags=["models"], responses=_RUNNING)
@access(ADMIN, model="name", action="backtest")
async def backtest(
    name: NameDep,
    body: BacktestCreate,
    request: Request,
    response: Response,
    service: ServiceDep,
    key: IdempotencyKeyDep = None,
) -> JobPublic:
    """Replay the model's log through candidate learners, without touching the model, and
    answer each one's mistakes, error rate and mistake curve beside the model's own on the
    same trials. 200 with the result when it ends within ``wait`` seconds; else 202 with
    the running job (``Location``: poll ``GET /v1/jobs/{id}``). A labelled prediction is
    judged as it was served: each candidate predicts it at the version that served it.
    422 naming the field for a learner the model's input cannot feed, or a version it
    cannot be replayed from, or a replay beyond ``backtest_max_trials``; 429 while the
    worker runs ``backtest_jobs`` already. With an ``Idempotency-Key``, a retry gets the
    same job."""
    idem = idempotency(key, "backtest", name, await request.body())
    learners = body.learner if isinstance(body.learner, list) else [body.learner]
    doc = await service.backtests.start(
        name, learners, body.from_version, points=body.points, wait=body.wait, idem=idem
    )
    return _answer(doc, response)


@router.get("/models/{name}/backtest", tags=["models"], responses=_RUNNING)
@access(READ, model="name")
async def latest_backtest(name: NameDep, response: Response, service: ServiceDep) -> JobPublic:
    """The model's latest backtest, as ``GET /v1/jobs/{id}`` answers it (kept for a day
    after its last report); 404 when none is kept."""
    stored = await service.store.read(name)
    doc = await service.backtests.latest(name, stored.incarnation)
    if doc is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no backtest of model {name!r} is kept")
    return _answer(doc, response)


def _visible(request: Request, doc: dict[str, Any] | None, job_id: str) -> dict[str, Any]:
    if doc is None or not principal_of(request.scope).sees(doc["model"]):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id!r}")
    return doc


@router.get("/jobs/{job_id}", responses=_RUNNING)
@access(READ)
async def get_job(
    job_id: JobIdDep, request: Request, response: Response, service: ServiceDep
) -> JobPublic:
    """A job as its worker last reported it (202 while it runs, with how far it got), and
    its result once it ended; kept for a day after its last report."""
    doc = _visible(request, await service.backtests.read(job_id), job_id)
    return _answer(doc, response)


@router.delete("/jobs/{job_id}", responses=_RUNNING)
@access(ADMIN, action="cancel job")
async def cancel_job(
    job_id: JobIdDep, request: Request, response: Response, service: ServiceDep
) -> JobPublic:
    """Ask a running job to stop: its worker stops after the step it is taking (2,048 log
    entries) and keeps what it computed as a partial result. The job as it is now."""
    doc = _visible(request, await service.backtests.read(job_id), job_id)
    request.scope["committee.model"] = doc["model"]  # for the audit log
    request.scope["committee.detail"] = f"job {job_id}"
    if doc["status"] == "running":
        doc = _visible(request, await service.backtests.jobs.cancel(job_id), job_id)
    return _answer(doc, response)
