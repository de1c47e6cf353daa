"""The FastAPI application: settings and Redis in, routers, error mapping, Redis out."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware

from app.core.collector import collect_less
from app.core.logs import dump_stacks_on_sigusr1
from app.core.settings import Settings
from app.http import openapi
from app.http.error_status import MAPPED, error_body
from app.http.fastpath import TrialFastPath
from app.http.guard import Guard
from app.http.limits import BodyLimit, Busy, HeaderLimit
from app.http.metrics import RequestMetrics
from app.http.permissions import RouteTable
from app.http.routers import (
    alerts,
    backtests,
    challengers,
    dashboard,
    docs,
    events,
    health,
    keys,
    metrics,
    models,
    stats,
    stream,
    trials,
)
from app.http.routers import log as model_log
from app.http.routers.common import add_components
from app.service.access import Auth
from app.service.model_service import ModelService
from app.service.warmup import Warmup
from storage.auth import AuthStore
from storage.client import close, connect
from storage.repository import ModelStore

log = logging.getLogger("committee")
JSON = "application/json"


def fastapi_options(settings: Settings) -> dict[str, Any]:
    """Options of the FastAPI app beyond its description: FastAPI's own OpenTelemetry
    instrumentation only when asked for (``opentelemetry``), since recent FastAPI asks
    the OpenTelemetry providers on every request otherwise."""
    if settings.opentelemetry or "telemetry" not in inspect.signature(FastAPI).parameters:
        return {}
    off = dict.fromkeys(("tracing", "metrics", "logs", "operation_spans"), False)
    return {"telemetry": off}


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app; ``settings`` default to the ``COMMITTEE_*`` environment."""
    settings = settings or Settings()
    dump_stacks_on_sigusr1()
    if not settings.redis_url:
        raise RuntimeError(
            "COMMITTEE_REDIS_URL is not set: give a Redis URL, or run `committee serve`, "
            "which starts a private Redis when none is given"
        )
    url = settings.redis_url

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.routes = RouteTable(app.routes)  # routes added since the build, too
        # a write waits up to ack_timeout_ms for its replica (WAIT) on the shared script
        # connection: its watchdog waits that long and the usual 5 s beyond
        client = connect(url, timeout=5.0 + settings.ack_timeout_ms / 1000)
        # kernels compile in a thread; /readyz waits for them, and so does the first learner
        warmup = Warmup() if settings.warmup else None
        if warmup is not None:
            warmup.start()
        service = ModelService(
            ModelStore(
                client,
                settings.key_prefix,
                ack=settings.ack,
                ack_timeout_ms=settings.ack_timeout_ms,
            ),
            settings,
            warmup,
        )
        auth = Auth(AuthStore(client, settings.key_prefix, settings.audit_max), settings)
        app.state.service = service
        app.state.auth = auth
        app.state.warmup = warmup
        service.start()
        await auth.start()
        collect_less(settings.gc_threshold)
        try:
            yield
        finally:
            # bounded: a stopping worker never waits on Redis for long
            try:
                async with asyncio.timeout(settings.shutdown_timeout):
                    await auth.close()
                    await service.close()
                    await close(client)
            except TimeoutError:
                log.error("shutdown took over %d s: cut short", settings.shutdown_timeout)

    app = FastAPI(
        title="Committee",
        summary="On-line learning service: Winnow-family learners and live classifier fusion",
        version="0.1.0",
        lifespan=lifespan,
        # served by app.http.routers.docs, the docs with their assets
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        **fastapi_options(settings),
    )
    # outermost last: metrics see every answer; CORS answers preflights before the guard
    app.add_middleware(TrialFastPath)
    app.add_middleware(
        BodyLimit, max_bytes=settings.max_body_bytes, max_depth=settings.max_json_depth
    )
    app.add_middleware(Guard, settings=settings)
    app.add_middleware(
        HeaderLimit,
        max_headers=settings.max_headers,
        max_header_bytes=settings.max_header_bytes,
    )
    app.add_middleware(Busy, most=settings.max_connections)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PUT", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key"],
            expose_headers=[
                "Retry-After",
                "RateLimit-Limit",
                "RateLimit-Remaining",
                *model_log.PAGE_HEADERS,
            ],
        )
    app.add_middleware(RequestMetrics)
    app.include_router(health.router)
    app.include_router(metrics.router)
    app.include_router(models.router)
    app.include_router(backtests.router)
    app.include_router(challengers.router)
    app.include_router(alerts.router)
    app.include_router(trials.router)
    app.include_router(model_log.router)
    app.include_router(stats.router)
    app.include_router(events.router)
    app.include_router(stream.router)
    app.include_router(keys.router)
    app.include_router(dashboard.router)
    app.include_router(docs.router)

    async def mapped(request: Request, e: Exception) -> Response:
        code, body, headers = error_body(e)
        if code >= 500:
            log.error("%s %s: %s", request.method, request.url.path, e)
        # orjson writes a NaN or an infinity a client sent (echoed in a 422) as null,
        # where the json module would fail the answer
        content = orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
        return Response(content, status_code=code, headers=headers, media_type=JSON)

    for cls in (*MAPPED, RequestValidationError):
        app.add_exception_handler(cls, mapped)
    add_components(app)
    openapi.install(app, settings)
    app.state.routes = RouteTable(app.routes)  # every route declares who may call it
    return app
