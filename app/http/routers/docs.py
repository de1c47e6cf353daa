"""The API's documentation pages, ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), served
with their scripts and style sheets from this service: they work on a host that reaches
no CDN. The assets are those the ``fastapi-offline`` package ships."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import APIRouter, HTTPException, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from app.http.permissions import OPEN, access

__all__ = ["router"]


def _assets_dir() -> Path:
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the fastapi-offline package, which ships the docs' assets, is missing")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


ASSETS_DIR = _assets_dir()
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}
PREFIX = "/static/docs/"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"
OPENAPI = "/openapi.json"
# the pages fetch from this service only (ReDoc would show its logo from its CDN);
# their start-up scripts are inline, and ReDoc runs a worker from a blob
POLICY = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self' 'unsafe-inline'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; worker-src 'self' blob:; "
    "frame-ancestors 'none'"
}

router = APIRouter(tags=["docs"], include_in_schema=False)


def _root(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


@router.get(PREFIX + "{asset}")
@access(OPEN)
async def asset(asset: str) -> FileResponse:
    media_type = ASSETS.get(asset)
    if media_type is None:
        raise HTTPException(404, f"no asset {asset!r}: one of {', '.join(sorted(ASSETS))}")
    return FileResponse(ASSETS_DIR / asset, media_type=media_type)


@router.get(OPENAPI)
@access(OPEN)
async def openapi_document(request: Request) -> JSONResponse:
    """The OpenAPI document; behind a proxy's prefix (``root_path``), that prefix is its
    first server."""
    root = _root(request)
    doc = request.app.openapi()
    if root and root not in {s.get("url") for s in doc.get("servers", [])}:
        doc = {**doc, "servers": [{"url": root}, *doc.get("servers", [])]}
    return JSONResponse(doc)


@router.get("/docs")
@access(OPEN)
async def swagger_ui(request: Request) -> HTMLResponse:
    root = _root(request)
    page = get_swagger_ui_html(
        openapi_url=root + OPENAPI,
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=root + PREFIX + "swagger-ui-bundle.js",
        swagger_css_url=root + PREFIX + "swagger-ui.css",
        swagger_favicon_url=root + PREFIX + "favicon.png",
        oauth2_redirect_url=root + OAUTH2_REDIRECT,
        swagger_ui_parameters={"validatorUrl": None},
    )
    page.headers.update(POLICY)
    return page


@router.get(OAUTH2_REDIRECT)
@access(OPEN)
async def swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
@access(OPEN)
async def redoc(request: Request) -> HTMLResponse:
    root = _root(request)
    page = get_redoc_html(
        openapi_url=root + OPENAPI,
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=root + PREFIX + "redoc.standalone.js",
        redoc_favicon_url=root + PREFIX + "favicon.png",
        with_google_fonts=False,
    )
    page.headers.update(POLICY)
    return page
