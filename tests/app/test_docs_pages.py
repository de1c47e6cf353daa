"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) render the API's operations in a real
headless Chromium on a host that reaches nothing but this service: their scripts and
style sheets come from the service itself, and their policy lets them fetch nothing
from anywhere else (ReDoc would fetch its logo from its CDN)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from _browser import chromium, wait_for
from _server import ServerThread
from selenium import webdriver

from app.core.settings import Settings

# each request a page's policy blocked, recorded from the start of every page (such a
# request never left, though the browser may still time it as a resource); what the
# pages fetched; and the operations they show
_RECORD_BLOCKED = """
window.blocked = [];
document.addEventListener('securitypolicyviolation', (e) => window.blocked.push(e.blockedURI));
"""
_FETCHED = """
return performance.getEntriesByType('resource')
  .filter((e) => e.duration > 0 || e.transferSize > 0 || e.responseStatus > 0)
  .map((e) => e.name)
  .filter((name) => !window.blocked.includes(name));
"""
_SWAGGER_OPERATIONS = """
return [...document.querySelectorAll('.opblock-summary-path')]
  .map((el) => el.getAttribute('data-path') || el.textContent.trim());
"""
_REDOC_OPERATIONS = """
return [...document.querySelectorAll('[data-section-id^="operation/"]')]
  .map((el) => el.getAttribute('data-section-id'));
"""


@pytest.fixture(scope="module")
def server(redis_url: str) -> Iterator[ServerThread]:
    settings = Settings(redis_url=redis_url, key_prefix=f"d-{uuid.uuid4().hex[:12]}")
    with ServerThread(settings) as s:
        yield s


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as driver:
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": _RECORD_BLOCKED})
        yield driver


def paths(server: ServerThread) -> set[str]:
    doc: dict[str, Any] = httpx.get(f"{server.url}/openapi.json").json()
    return set(doc["paths"])


def fetched_elsewhere(driver: webdriver.Chrome, server: ServerThread) -> list[str]:
    got: list[str] = driver.execute_script(_FETCHED)
    return [url for url in got if not url.startswith(server.url + "/")]


def test_the_assets_are_served_by_the_service(server: ServerThread) -> None:
    with httpx.Client(base_url=server.url) as c:
        for page, asset in (("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")):
            html = c.get(page)
            assert html.status_code == 200 and f"/static/docs/{asset}" in html.text
            assert "cdn" not in html.text.lower()
            js = c.get(f"/static/docs/{asset}")
            assert js.status_code == 200 and len(js.content) > 100_000
            assert js.headers["content-type"].startswith("text/javascript")
        assert c.get("/static/docs/nothing.js").status_code == 404


def test_swagger_ui_renders_every_operation_offline(
    server: ServerThread, browser: webdriver.Chrome
) -> None:
    browser.get(f"{server.url}/docs")
    want = paths(server)
    shown = wait_for(
        lambda: set(browser.execute_script(_SWAGGER_OPERATIONS)),
        lambda got: want <= got,
        "Swagger UI to list the operations",
    )
    assert want <= shown, sorted(want - shown)
    assert fetched_elsewhere(browser, server) == []


def test_redoc_renders_the_operations_offline(
    server: ServerThread, browser: webdriver.Chrome
) -> None:
    browser.get(f"{server.url}/redoc")
    shown = wait_for(
        lambda: browser.execute_script(_REDOC_OPERATIONS),
        lambda got: len(got) >= len(paths(server)),
        "ReDoc to list the operations",
    )
    assert len(shown) >= len(paths(server)), shown
    assert fetched_elsewhere(browser, server) == []
