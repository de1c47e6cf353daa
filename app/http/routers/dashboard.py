"""The operators' dashboard: one page, its script and its style sheet; no build step.

The page polls the JSON API (``/v1/models`` and each model's ``/stats``) and draws its
own charts, so nothing is fetched from anywhere but this service.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse

from app.http.permissions import OPEN, access

STATIC = Path(__file__).resolve().parent.parent / "static"
ASSETS = {
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
}
# small files: always revalidate, so an upgraded service never runs last release's script
HEADERS = {"Cache-Control": "no-cache"}

router = APIRouter(tags=["dashboard"], include_in_schema=False)


@router.get("/")
@access(OPEN)
async def page() -> FileResponse:
    """The dashboard; ``?every=250`` polls every 250 ms instead of every second."""
    return FileResponse(
        STATIC / "index.html", media_type="text/html; charset=utf-8", headers=HEADERS
    )


@router.get("/static/{asset}")
@access(OPEN)
async def asset(asset: str) -> FileResponse:
    media_type = ASSETS.get(asset)
    if media_type is None:
        raise HTTPException(404, f"no asset {asset!r}: one of {', '.join(sorted(ASSETS))}")
    return FileResponse(STATIC / asset, media_type=media_type, headers=HEADERS)
