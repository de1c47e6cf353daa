"""Headless Chromium, driven by Selenium through Debian's chromedriver, and what the
dashboard shows of a model, read from the page's ``data-`` attributes and text."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless=new",
    "--no-sandbox",  # the tests run as root
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-component-update",
    "--window-size=1500,1100",
)

T = TypeVar("T")


@contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    """A headless Chromium; fails (never skips) when it is not installed."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(
            "the dashboard tests need Chromium and its driver, but found no "
            f"{' and no '.join(missing)}: `.ci/run` installs them "
            "(apt-get install chromium chromium-driver)",
            pytrace=False,
        )
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    # an explicit driver path: Selenium Manager never runs, so nothing is downloaded
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(read: Callable[[], T], done: Callable[[T], bool], what: str, timeout: float = 20) -> T:
    """Read until ``done`` holds; return the last reading either way (assert on it then,
    so a failure shows what the page held)."""
    deadline = time.monotonic() + timeout
    value = read()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(0.05)
        value = read()
    if not done(value):
        print(f"timed out after {timeout} s waiting for {what}")
    return value


_READ_CARD = """
const card = [...document.querySelectorAll("[data-model]")]
  .find((el) => el.dataset.model === arguments[0]);
if (!card) return null;
const fields = {};
for (const el of card.querySelectorAll("[data-field]")) {
  if (!el.closest("[data-learner]")) fields[el.dataset.field] = el.textContent.trim();
}
const curve = card.querySelector('[data-chart="curve"]');
const line = curve.querySelector("polyline");
const experts = card.querySelector('[data-chart="experts"]');
return {
  fields,
  points: Number(curve.dataset.points),
  marks: [...curve.querySelectorAll("g.mark")].map((g) => ({
    version: Number(g.dataset.version),
    title: g.querySelector("title").textContent,
    x: g.querySelector("line").getBoundingClientRect().x,
  })),
  challengers: [...curve.querySelectorAll("g.challenger")].map((g) => ({
    name: g.dataset.name,
    mistakes: Number(g.dataset.mistakes),
    title: g.querySelector("title").textContent,
    vertices: g.querySelector("polyline").getAttribute("points").trim().split(/\\s+/).length,
  })),
  candidates: [...curve.querySelectorAll("g.candidate")].map((g) => ({
    mistakes: Number(g.dataset.mistakes),
    title: g.querySelector("title").textContent,
    vertices: g.querySelector("polyline").getAttribute("points").trim().split(/\\s+/).length,
  })),
  vertices: line ? line.getAttribute("points").trim().split(/\\s+/).length : 0,
  experts_shown: !card.querySelector('[data-panel="experts"]').hidden,
  experts_total: Number(experts.dataset.total ?? 0),
  bars: [...experts.querySelectorAll("[data-expert]")].map((g) => ({
    name: g.dataset.expert,
    weight: Number(g.dataset.weight),
    width: g.querySelector(".bar").getBoundingClientRect().width,
  })),
  learners_shown: !card.querySelector('[data-panel="learners"]').hidden,
  learners: [...card.querySelectorAll("[data-learner]")].map((tr) => ({
    name: tr.dataset.learner,
    leader: tr.dataset.leader === "true",
    mistakes: tr.querySelector('[data-field="mistakes"]').textContent.trim(),
    recent_mistakes: tr.querySelector('[data-field="recent_mistakes"]').textContent.trim(),
  })),
  height: card.getBoundingClientRect().height,
};
"""


_READ_SCORECARDS = """
const card = [...document.querySelectorAll("[data-model]")]
  .find((el) => el.dataset.model === arguments[0]);
if (!card) return null;
const panel = card.querySelector('[data-panel="scorecards"]');
return {
  shown: !panel.hidden,
  sorted: Object.fromEntries([...panel.querySelectorAll("th[data-sort]")]
    .map((th) => [th.dataset.sort, th.getAttribute("aria-sort")])),
  rows: [...panel.querySelectorAll("tr[data-scorecard]")].map((tr) => ({
    expert: tr.dataset.scorecard,
    retired: tr.dataset.retired === "true",
    ...Object.fromEntries([...tr.querySelectorAll("[data-score]")]
      .map((td) => [td.dataset.score, td.textContent.trim()])),
    spark: Number(tr.querySelector("svg.spark").dataset.points),
    spark_vertices: (tr.querySelector("svg.spark polyline")?.getAttribute("points") ?? "")
      .trim().split(/\\s+/).filter(Boolean).length,
  })),
};
"""


def read_scorecards(driver: webdriver.Chrome, name: str) -> dict[str, Any] | None:
    """The scorecards table of model ``name``: whether it shows, each column's sort and
    each row's text (None while the model has no card)."""
    got: dict[str, Any] | None = driver.execute_script(_READ_SCORECARDS, name)
    return got


def sort_scorecards(driver: webdriver.Chrome, name: str, column: str) -> None:
    """Click the heading of ``column`` in model ``name``'s scorecards table."""
    card = driver.find_element("css selector", f'[data-model="{name}"]')
    card.find_element("css selector", f'[data-panel="scorecards"] th[data-sort="{column}"]').click()


def read_card(driver: webdriver.Chrome, name: str) -> dict[str, Any] | None:
    """What the page shows of model ``name``: its fields' text, the curve and the charts
    (None while it has no card)."""
    got: dict[str, Any] | None = driver.execute_script(_READ_CARD, name)
    return got
