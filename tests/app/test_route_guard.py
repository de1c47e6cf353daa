"""Served: a route added without a declaration fails the start; a path no route serves is
refused by the guard, not read; a route added with one is guarded by it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from app.core.settings import Settings
from app.http.main import create_app
from app.http.permissions import ADMIN, UndeclaredRoute, access


def test_a_route_added_after_the_build_without_a_declaration_fails_the_start(
    api_settings: Settings,
) -> None:
    app = create_app(api_settings)

    async def undeclared() -> dict[str, str]:
        return {"open": "by omission"}

    app.add_api_route("/v1/undeclared", undeclared, methods=["GET"])

    async def start() -> None:
        async with app.router.lifespan_context(app):
            pass

    with pytest.raises(UndeclaredRoute, match="GET /v1/undeclared"):
        asyncio.run(start())


def test_a_path_no_route_serves_is_refused_before_the_app_reads_it(
    api_settings: Settings, server_thread: Any
) -> None:
    """Auth on: an unknown path is a 404 from the guard whatever the key, and a route
    added after the build with a declaration is guarded by it."""
    # keys of a prefix of its own: auth goes on for this prefix only
    settings = api_settings.model_copy(update={"key_prefix": f"t-{uuid.uuid4().hex[:12]}"})
    app = create_app(settings)

    @app.get("/v1/extra", include_in_schema=False)
    @access(ADMIN)
    async def extra() -> dict[str, str]:
        return {"reached": "yes"}

    with server_thread(settings, app=app) as server, httpx.Client(base_url=server.url) as c:
        made = c.post("/v1/keys", json={"scope": "admin", "models": "*"})
        assert made.status_code == 201, made.text
        admin = {"Authorization": f"Bearer {made.json()['key']}"}
        made = c.post("/v1/keys", json={"scope": "read", "models": "*"}, headers=admin)
        reader = {"Authorization": f"Bearer {made.json()['key']}"}
        for headers in ({}, reader, admin):
            r = c.get("/v1/nothing/here", headers=headers)
            assert r.status_code == 404 and "GET /v1/nothing/here" in r.json()["detail"]
            r = c.post("/v1/models/m/nothing", headers=headers, json={})
            assert r.status_code == 404
        assert c.get("/v1/extra").status_code == 401
        assert c.get("/v1/extra", headers=reader).status_code == 403
        assert c.get("/v1/extra", headers=admin).json() == {"reached": "yes"}
        # the built-in open routes stay open with auth on
        assert c.get("/openapi.json").status_code == 200
        assert c.get("/healthz").status_code == 200
