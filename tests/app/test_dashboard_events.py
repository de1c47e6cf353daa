"""The dashboard in headless Chromium, fed by a model's event stream: its card follows
the model's trials with no statistics poll between, and falls back to polling while the
stream is refused (the worker's bound of streams reached), until it is open again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from _browser import chromium, read_card, wait_for
from selenium import webdriver

from app.core.settings import Settings

EVERY_MS = 250
# the stats requests the page made so far (a resource timing entry each)
_STATS_READS = """
return performance.getEntriesByType("resource")
  .filter((e) => new URL(e.name).pathname.endsWith("/stats")).length;
"""


def _model(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "labels": ["a", "b"],
        "input": {"experts": {"expert_names": ["x", "y"]}},
        "learner": {"kind": "weighted-majority"},
    }


def _learn(c: httpx.Client, name: str, n: int, seed: int) -> int:
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(n):
        y = "a" if rng.random() < 0.5 else "b"
        items.append({"instance": {"experts": {"x": y, "y": "a"}}, "label": y})
    r = c.post(f"/v1/models/{name}/learn/batch", json={"items": items})
    assert r.status_code == 200, r.text
    return int(c.get(f"/v1/models/{name}").json()["version"])


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as driver:
        yield driver


@pytest.fixture
def own_url(api_settings: Settings, server_thread: Any) -> Iterator[str]:
    """A server of its own: its models are this test's alone (the page streams a few)."""
    update = {"key_prefix": f"t-{uuid.uuid4().hex[:12]}"}
    with server_thread(api_settings.model_copy(update=update)) as server:
        yield server.url


@pytest.fixture
def one_stream(api_settings: Settings, server_thread: Any) -> Iterator[str]:
    """A server of its own that serves one event stream at a time."""
    update = {"key_prefix": f"t-{uuid.uuid4().hex[:12]}", "events_max_connections": 1}
    with server_thread(api_settings.model_copy(update=update)) as server:
        yield server.url


def _open(browser: webdriver.Chrome, url: str) -> None:
    browser.get(f"{url}/?every={EVERY_MS}")
    browser.execute_script("performance.setResourceTimingBufferSize(1000000)")
    state = wait_for(
        lambda: browser.execute_script("return document.getElementById('status').dataset.state"),
        lambda s: s == "live",
        "the first poll",
    )
    assert state == "live"


def _stream_state(browser: webdriver.Chrome, name: str) -> str | None:
    state: str | None = browser.execute_script(
        "const el = [...document.querySelectorAll('[data-model]')]"
        ".find((el) => el.dataset.model === arguments[0]); return el?.dataset.events ?? null",
        name,
    )
    return state


def _shown_version(browser: webdriver.Chrome, name: str) -> str | None:
    card = read_card(browser, name)
    return None if card is None else str(card["fields"]["version"])


def test_the_card_follows_the_model_from_its_events(
    browser: webdriver.Chrome, own_url: str, model_name: str
) -> None:
    with httpx.Client(base_url=own_url, timeout=60) as client:
        _follows(browser, client, own_url, model_name)


def _follows(browser: webdriver.Chrome, client: httpx.Client, url: str, model_name: str) -> None:
    assert client.post("/v1/models", json=_model(model_name)).status_code == 201
    first = _learn(client, model_name, 50, 1)
    _open(browser, url)
    state = wait_for(lambda: _stream_state(browser, model_name), lambda s: s == "live", "events")
    assert state == "live"
    assert _shown_version(browser, model_name) == f"{first:,}"
    reads = browser.execute_script(_STATS_READS)
    for seed in (2, 3):  # the card follows each batch of trials, and its curve with it
        version = _learn(client, model_name, 120, seed)
        shown = wait_for(
            lambda: _shown_version(browser, model_name),
            lambda v, version=version: v == f"{version:,}",
            "the card at the model's version",
        )
        assert shown == f"{version:,}"
        card = read_card(browser, model_name)
        assert card is not None and card["points"] > 0
        stats = client.get(f"/v1/models/{model_name}/stats").json()
        assert card["fields"]["mistakes"] == f"{stats['mistakes']:,}"
    # no statistics poll between: the card was drawn from the stream alone
    assert browser.execute_script(_STATS_READS) == reads
    assert _stream_state(browser, model_name) == "live"


def test_the_card_polls_while_its_stream_is_refused(
    browser: webdriver.Chrome, one_stream: str, model_name: str
) -> None:
    with httpx.Client(base_url=one_stream, timeout=60) as c:
        assert c.post("/v1/models", json=_model(model_name)).status_code == 201
        _learn(c, model_name, 30, 4)
        # another client holds the worker's one stream: the page's are refused (503)
        with c.stream("GET", f"/v1/models/{model_name}/events") as held:
            assert held.status_code == 200
            lines = held.iter_lines()  # kept: dropping it would close the stream
            assert next(lines).startswith("retry:")
            _open(browser, one_stream)
            version = _learn(c, model_name, 80, 5)
            shown = wait_for(
                lambda: _shown_version(browser, model_name),
                lambda v: v == f"{version:,}",
                "the card at the model's version, polled",
            )
            assert shown == f"{version:,}"
            assert _stream_state(browser, model_name) == "polling"
            assert browser.execute_script(_STATS_READS) > 0
        # the stream free again: the page opens its own, after its retry delay
        state = wait_for(
            lambda: _stream_state(browser, model_name), lambda s: s == "live", "events", 40
        )
        assert state == "live"
        version = _learn(c, model_name, 40, 6)
        shown = wait_for(
            lambda: _shown_version(browser, model_name),
            lambda v: v == f"{version:,}",
            "the card at the model's version, pushed",
        )
        assert shown == f"{version:,}"
