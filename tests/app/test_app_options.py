"""Options of the app itself: FastAPI's own OpenTelemetry instrumentation runs only when
``opentelemetry`` asks for it (otherwise it asks the providers on every request)."""

from __future__ import annotations

import inspect
import uuid

import httpx
import pytest
from _server import ServerThread
from fastapi import FastAPI

from app.core.settings import Settings

if "telemetry" not in inspect.signature(FastAPI).parameters:
    pytest.skip(
        "this FastAPI has no OpenTelemetry instrumentation of its own", allow_module_level=True
    )
trace = pytest.importorskip("opentelemetry.trace")


@pytest.mark.parametrize("on", [False, True])
def test_fastapi_asks_the_opentelemetry_providers_only_when_told_to(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, on: bool
) -> None:
    asked = []
    provider = trace.get_tracer_provider

    def counted() -> object:
        asked.append(1)
        return provider()

    monkeypatch.setattr(trace, "get_tracer_provider", counted)
    settings = Settings(
        redis_url=redis_url, key_prefix=f"o-{uuid.uuid4().hex[:12]}", opentelemetry=on
    )
    with ServerThread(settings) as server, httpx.Client(base_url=server.url) as c:
        before = len(asked)
        for _ in range(5):
            assert c.get("/v1/models").status_code == 200
        assert (len(asked) - before >= 5) is on
