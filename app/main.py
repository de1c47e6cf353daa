"""The FastAPI application: settings and Redis in, routers, error mapping, Redis out."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from app import openapi
from app.config import Settings
from app.fastpath import TrialFastPath
from app.limits import BodyLimit, Busy
from app.metrics import RequestMetrics
from app.routers import dashboard, health, metrics, models, stats, stream, trials
from app.routers._lean import add_components
from app.service import ModelService
from app.status import MAPPED, error_body
from app.warm import Warmup
from storage.client import close, connect
from storage.repository import ModelStore

log = logging.getLogger("committee")


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app; ``settings`` default to the ``COMMITTEE_*`` environment."""
    settings = settings or Settings()
    if not settings.redis_url:
        raise RuntimeError(
            "COMMITTEE_REDIS_URL is not set: give a Redis URL, or run `committee serve`, "
            "which starts a private Redis when none is given"
        )
    url = settings.redis_url

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = connect(url)
        # kernels compile in a thread; /readyz waits for them, and so does the first learner
        warmup = Warmup() if settings.warmup else None
        if warmup is not None:
            warmup.start()
        service = ModelService(ModelStore(client, settings.key_prefix), settings, warmup)
        app.state.service = service
        app.state.warmup = warmup
        service.start()
        try:
            yield
        finally:
            await service.close()
            await close(client)

    app = FastAPI(
        title="Committee",
        summary="On-line learning service: Winnow-family learners and live classifier fusion",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.add_middleware(TrialFastPath)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(Busy, most=settings.max_connections)
    app.add_middleware(RequestMetrics)
    app.include_router(health.router)
    app.include_router(metrics.router)
    app.include_router(models.router)
    app.include_router(trials.router)
    app.include_router(stats.router)
    app.include_router(stream.router)
    app.include_router(dashboard.router)

    async def mapped(request: Request, e: Exception) -> JSONResponse:
        code, body, headers = error_body(e)
        if code >= 500:
            log.error("%s %s: %s", request.method, request.url.path, e)
        return JSONResponse(body, status_code=code, headers=headers)

    for cls in MAPPED:
        app.add_exception_handler(cls, mapped)
    add_components(app)
    openapi.install(app, settings)
    return app
