"""Every route declares who may call it, the app refuses to build without it, and the
route table finds a request's route as the router does."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from app.core.settings import Settings
from app.http.main import create_app
from app.http.permissions import (
    ADMIN,
    OPEN,
    READ,
    WRITE,
    RouteTable,
    UndeclaredRoute,
    access,
    declared,
    flat_routes,
)


@pytest.fixture
def app() -> FastAPI:
    return create_app(Settings(redis_url="redis://127.0.0.1:1"))


def test_every_route_declares_its_access_and_the_document_shows_it(app: FastAPI) -> None:
    routes = flat_routes(app.routes)
    assert len(routes) > 30
    missing = [getattr(r, "path", r) for r in routes if declared(r) is None]
    assert missing == []
    doc = app.openapi()
    for route in routes:
        allowed = declared(route)
        assert allowed is not None
        for method in getattr(route, "methods", None) or ():
            op = doc["paths"].get(route.path, {}).get(method.lower())
            if op is None:  # not in the document (the dashboard, the docs)
                assert allowed.scope is None, route.path
                continue
            assert ("security" in op) == (allowed.scope is not None), (method, route.path)
            assert ("404" in op["responses"]) >= (allowed.model is not None), route.path


def test_a_route_without_a_declaration_fails_the_build(app: FastAPI) -> None:
    async def undeclared() -> dict[str, str]:
        return {"open": "by omission"}

    app.add_api_route("/v1/undeclared", undeclared, methods=["GET"])
    with pytest.raises(UndeclaredRoute, match="GET /v1/undeclared"):
        RouteTable(app.routes)


def test_a_declaration_names_a_parameter_of_its_path() -> None:
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    @app.get("/v1/things/{thing}")
    @access(READ, model="name")
    async def thing(thing: str) -> dict[str, str]:
        return {}

    with pytest.raises(UndeclaredRoute, match="'name', not a parameter"):
        RouteTable(app.routes)


def test_the_table_finds_routes_as_the_router_does() -> None:
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    @app.get("/v1/models/{name}")
    @access(READ, model="name")
    async def one(name: str) -> None: ...

    @app.delete("/v1/models/{name}")
    @access(ADMIN, model="name", action="delete model")
    async def drop(name: str) -> None: ...

    @app.post("/v1/models/{name}/predict")
    @access(WRITE, model="name")
    async def predict(name: str) -> None: ...

    @app.get("/files/{rest:path}")
    @access(OPEN)
    async def files(rest: str) -> None: ...

    table = RouteTable(app.routes)
    got = table.find("GET", "/v1/models/m1")
    assert got is not None and got.access.scope == READ and got.model == "m1"
    assert got.route is not None and got.path == "/v1/models/{name}"
    got = table.find("DELETE", "/v1/models/m1")
    assert got is not None and got.access.action == "delete model"
    # a method the path is not served for: the strictest of its routes, and no route (405)
    got = table.find("PUT", "/v1/models/m1")
    assert got is not None and got.route is None and got.access.scope == ADMIN
    got = table.find("POST", "/v1/models/m1/predict")
    assert got is not None and got.access.scope == WRITE and got.model == "m1"
    got = table.find("GET", "/files/a/b/c")
    assert got is not None and got.access.scope is OPEN
    for method, path in [
        ("GET", "/v1/models"),
        ("GET", "/v1/models/"),  # an empty name is not a name
        ("GET", "/v1/models/m1/nothing"),
        ("POST", "/v1/models/m1/predict/more"),
        ("GET", "/v2/models/m1"),
    ]:
        assert table.find(method, path) is None, path
    assert table.find("GET", "/v1/models/m1", websocket=True) is None
