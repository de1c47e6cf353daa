"""The dashboard at ``/``: its files over HTTP, and what it shows in a real headless
Chromium while trials go through the API."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from _browser import chromium, read_card, read_scorecards, sort_scorecards, wait_for
from selenium import webdriver

from models.inputs.datasets import MajorityProblem

PROBLEM = MajorityProblem(n=20, r=10, k=5, noise=0.05)
NAMES = [f"clf{i}" for i in range(PROBLEM.n_experts)]
MAX_BARS = 16  # as in dashboard.js
EVERY_MS = 250
COUNTERS = (
    "version",
    "labelled",
    "learned",
    "mistakes",
    "pending",
    "expired",
    "predictions",
    "updates",
    "late_labels",
    "quarantined",
    "refused",
)
ASSETS = {
    "static/dashboard.css": "text/css",
    "static/dashboard.js": "text/javascript",
}
# an XML namespace names SVG elements; nothing is fetched from it
NOT_FETCHED = {"http://www.w3.org/2000/svg"}


# ---- the files --------------------------------------------------------------------------


def test_page_and_assets_are_served_and_self_contained(client: httpx.Client) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    referenced = set(re.findall(r'(?:src|href)="([^"]+)"', page.text)) - {"data:,"}
    assert referenced == set(ASSETS)
    bodies = {"/": page.text}
    for path, media_type in ASSETS.items():
        r = client.get(f"/{path}")
        assert r.status_code == 200, path
        assert r.headers["content-type"] == f"{media_type}; charset=utf-8"
        bodies[path] = r.text
    for path, body in bodies.items():
        urls = set(re.findall(r"https?://[^\s\"'`)]*", body)) - NOT_FETCHED
        assert not urls, f"{path} refers to other hosts: {sorted(urls)}"
        assert not re.search(r"""["'(]//\w""", body), f"{path} has a protocol-relative URL"
    missing = client.get("/static/nothing.js")
    assert missing.status_code == 404 and "dashboard.js" in missing.json()["detail"]
    assert "/" not in client.get("/openapi.json").json()["paths"]


# ---- in Chromium ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as driver:
        yield driver


@pytest.fixture
def page(browser: webdriver.Chrome, api_url: str) -> webdriver.Chrome:
    """The dashboard, open and polling every 250 ms."""
    browser.get(f"{api_url}/?every={EVERY_MS}")
    state = wait_for(
        lambda: browser.execute_script("return document.getElementById('status').dataset.state"),
        lambda s: s == "live",
        "the first poll",
    )
    assert state == "live"
    assert browser.find_element("id", "every").text == str(EVERY_MS)
    # a reload would drop this: the page must update in place
    browser.execute_script("window.__sameDocument = true")
    return browser


def items(n: int, seed: int) -> list[dict[str, Any]]:
    xs, ys, _ = PROBLEM.sample(n, np.random.default_rng(seed))
    out = []
    for x, y in zip(xs, ys, strict=True):
        dense = x.dense(PROBLEM.n_experts, PROBLEM.k)
        votes = {NAMES[e]: int(np.argmax(dense[e])) for e in np.flatnonzero(dense.any(axis=1))}
        out.append({"instance": {"experts": votes}, "label": int(y)})
    return out


def create(client: httpx.Client, name: str, learner: dict[str, Any]) -> None:
    body = {
        "name": name,
        "labels": list(range(PROBLEM.k)),
        "input": {"experts": {"expert_names": NAMES}},
        "learner": learner,
    }
    r = client.post("/v1/models", json=body)
    assert r.status_code == 201, r.text


def learn(client: httpx.Client, name: str, n: int, seed: int) -> int:
    """Learn ``n`` trials; the number of mistakes made."""
    r = client.post(f"/v1/models/{name}/learn/batch", json={"items": items(n, seed)})
    assert r.status_code == 200, r.text
    return sum(bool(i["result"]["mistake"]) for i in r.json()["items"])


def settled(client: httpx.Client, name: str) -> dict[str, Any]:
    """Stats once every trial is folded and the learner summary has caught up."""
    deadline = time.monotonic() + 15
    while True:
        s: dict[str, Any] = client.get(f"/v1/models/{name}/stats").json()
        if s["folded"] == s["version"] == s["summary_version"]:
            return s
        if time.monotonic() > deadline:
            pytest.fail(f"stats of {name} did not settle in 15 s: {s}")
        time.sleep(0.05)


def percent(rate: float | None) -> str:
    """A rate as dashboard.js writes it: ``(100 * rate).toFixed(2)``, ties away from 0."""
    if rate is None:
        return "—"
    exact = Decimal(100 * rate).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    return f"{exact} %"


def expected(s: dict[str, Any]) -> dict[str, Any]:
    """What the card should show for these stats."""
    want: dict[str, Any] = {k: s[k] for k in COUNTERS}
    want["error_rate"] = percent(s["error_rate"])
    want["window_error_rate"] = percent(s["window"]["error_rate"])
    judged = sum(n for row in s["confusion"].values() for n in row.values())
    want["rate_trials"] = f"all {judged:,}" if judged else ""
    want["window_mistakes"] = s["window"]["mistakes"]
    want["points"] = len(s["curve"])
    weights = sorted((s["experts"] or {}).items(), key=lambda kv: (-kv[1], kv[0]))
    want["bars"] = [[n, w] for n, w in weights[:MAX_BARS]]
    want["leader"] = s["leader"]
    want["learners"] = [
        [m["name"], m["name"] == s["leader"], m["mistakes"], m["recent_mistakes"]]
        for m in s["learners"] or []
    ]
    return want


def shown(card: dict[str, Any] | None) -> dict[str, Any] | None:
    """The same facts, as the page shows them."""
    if card is None:
        return None
    fields = card["fields"]

    def number(text: str) -> int | str:
        return int(text.replace(",", "")) if re.fullmatch(r"[\d,]+", text) else text

    got: dict[str, Any] = {k: number(fields[k]) for k in COUNTERS}
    got["error_rate"] = fields["error_rate"]
    got["window_error_rate"] = fields["window_error_rate"]
    got["rate_trials"] = fields["rate_trials"]
    got["window_mistakes"] = number(fields["window_mistakes"])
    got["points"] = card["points"]
    got["bars"] = [[b["name"], b["weight"]] for b in card["bars"]] if card["experts_shown"] else []
    got["leader"] = fields["leader"] if card["learners_shown"] else None
    got["learners"] = [
        [m["name"], m["leader"], number(m["mistakes"]), number(m["recent_mistakes"])]
        for m in card["learners"]
    ]
    return got


def follow(driver: webdriver.Chrome, name: str, stats: dict[str, Any]) -> dict[str, Any]:
    """The card once it shows ``stats``; asserts that it does."""
    want = expected(stats)
    card = wait_for(lambda: read_card(driver, name), lambda c: shown(c) == want, f"card {name}")
    assert card is not None, f"no card for model {name}"
    assert shown(card) == want
    return card


def test_dashboard_follows_a_fusion_model(
    page: webdriver.Chrome, client: httpx.Client, model_name: str, tmp_path: Path
) -> None:
    assert read_card(page, model_name) is None
    create(client, model_name, {"kind": "committee", "alpha": 1.3})
    mistakes = learn(client, model_name, 100, seed=1)
    for item in items(3, seed=2):  # three predictions waiting for their labels
        r = client.post(f"/v1/models/{model_name}/predict", json={"instance": item["instance"]})
        assert r.status_code == 200, r.text
    s = settled(client, model_name)
    assert (s["version"], s["learned"], s["mistakes"], s["pending"]) == (100, 100, mistakes, 3)

    card = follow(page, model_name, s)
    assert card["height"] > 0 and card["fields"]["kind"] == "committee"
    spec = card["fields"]["spec"]
    assert "alpha=1.3" in spec and f"{len(NAMES)} sub-experts" in spec
    assert 0 < card["points"] <= card["vertices"]  # every point drawn (and the origin)
    assert card["experts_total"] == len(NAMES) and len(card["bars"]) == MAX_BARS
    assert card["fields"]["experts_note"] == f"largest {MAX_BARS} of {len(NAMES)}"
    widths = [b["width"] for b in card["bars"]]
    assert widths == sorted(widths, reverse=True) and widths[0] > 0

    more = learn(client, model_name, 100, seed=3)
    s2 = settled(client, model_name)
    assert (s2["version"], s2["mistakes"]) == (200, mistakes + more)
    card2 = follow(page, model_name, s2)
    assert card2["points"] > card["points"]
    assert page.execute_script("return window.__sameDocument === true"), "the page reloaded"
    page.save_screenshot(str(tmp_path / "dashboard.png"))


def test_dashboard_shows_v_combine_learners_and_leader(
    page: webdriver.Chrome, client: httpx.Client, model_name: str
) -> None:
    members = [
        {"kind": "recycling", "size": 20, "learner": {"kind": "committee", "alpha": a}}
        for a in (1.05, 2.0)
    ]
    create(client, model_name, {"kind": "v-combine", "learners": members})
    learn(client, model_name, 300, seed=4)
    s = settled(client, model_name)
    assert s["leader"] in {m["name"] for m in s["learners"]}

    card = follow(page, model_name, s)
    assert [m["leader"] for m in card["learners"]].count(True) == 1
    assert card["fields"]["kind"] == "v-combine"
    assert card["fields"]["leader"] == s["leader"]


def test_dashboard_drops_a_deleted_model(
    page: webdriver.Chrome, client: httpx.Client, model_name: str
) -> None:
    create(client, model_name, {"kind": "committee"})
    wait_for(lambda: read_card(page, model_name), lambda c: c is not None, "the card")
    assert client.delete(f"/v1/models/{model_name}").status_code == 204
    gone = wait_for(lambda: read_card(page, model_name), lambda c: c is None, "no card")
    assert gone is None


def test_dashboard_marks_the_changes_of_a_model_on_its_curve(
    page: webdriver.Chrome, client: httpx.Client, model_name: str
) -> None:
    create(client, model_name, {"kind": "committee", "alpha": 1.3})
    learn(client, model_name, 60, seed=5)
    r = client.post(f"/v1/models/{model_name}/experts", json={"add": ["late", "later"]})
    assert r.status_code == 200, r.text
    learn(client, model_name, 40, seed=6)
    r = client.post(f"/v1/models/{model_name}/labels", json={"add": [PROBLEM.k]})
    assert r.status_code == 200, r.text
    learn(client, model_name, 20, seed=7)
    s = settled(client, model_name)
    assert s["changes"] == [
        {"version": 61, "what": "+late, later"},
        {"version": 102, "what": f"+label {PROBLEM.k}"},
    ]
    card = wait_for(
        lambda: read_card(page, model_name),
        lambda c: c is not None and len(c["marks"]) == 2,
        f"the marks of {model_name}",
    )
    assert card is not None
    assert [m["version"] for m in card["marks"]] == [61, 102]
    assert card["marks"][0]["title"] == "trial 61: +late, later"
    assert card["marks"][0]["x"] < card["marks"][1]["x"]  # drawn where they happened


def test_dashboard_draws_the_latest_backtest_beside_the_live_curve(
    page: webdriver.Chrome, client: httpx.Client, model_name: str
) -> None:
    create(client, model_name, {"kind": "committee", "alpha": 1.3})
    learn(client, model_name, 120, seed=8)
    settled(client, model_name)
    learners = [{"kind": "committee", "alpha": 3.0}, {"kind": "multiclass-winnow"}]
    r = client.post(
        f"/v1/models/{model_name}/backtest",
        json={"learner": learners, "from_version": 40, "points": 10},
    )
    assert r.status_code == 200, r.text
    result = r.json()["result"]
    assert client.get(f"/v1/models/{model_name}/backtest").json()["result"] == result
    card = wait_for(
        lambda: read_card(page, model_name),
        lambda c: c is not None and len(c["candidates"]) == 2,
        f"the backtest of {model_name}",
    )
    assert card is not None
    got = card["candidates"]
    assert [c["mistakes"] for c in got] == [c["mistakes"] for c in result["candidates"]]
    assert got[0]["title"].startswith("backtest: committee(alpha=3), ")
    assert "trials after 40" in got[0]["title"]
    # each from the version it starts at to its last point
    assert [c["vertices"] for c in got] == [1 + len(c["curve"]) for c in result["candidates"]]


def test_dashboard_draws_the_challengers_beside_the_live_curve(
    page: webdriver.Chrome, client: httpx.Client, model_name: str
) -> None:
    create(client, model_name, {"kind": "committee", "alpha": 1.3})
    learn(client, model_name, 60, seed=9)
    for cname, spec in (
        ("wm", {"kind": "weighted-majority"}),
        ("mw", {"kind": "multiclass-winnow"}),
    ):
        r = client.post(
            f"/v1/models/{model_name}/challengers", json={"name": cname, "learner": spec}
        )
        assert r.status_code == 201, r.text
    learn(client, model_name, 90, seed=10)
    settled(client, model_name)
    want = client.get(f"/v1/models/{model_name}/challengers").json()["challengers"]
    card = wait_for(
        lambda: read_card(page, model_name),
        # the live curve, read apart from the challengers, may lag them a moment, and a
        # challenger's points beyond its last trial wait for it
        lambda c: (
            c is not None
            and [g["mistakes"] for g in c["challengers"]] == [w["mistakes"] for w in want]
            and [g["vertices"] for g in c["challengers"]] == [1 + len(w["curve"]) for w in want]
        ),
        f"the challengers of {model_name}",
    )
    assert card is not None
    got = card["challengers"]
    assert [g["name"] for g in got] == ["wm", "mw"]
    assert got[0]["title"].startswith("challenger wm: weighted-majority")
    assert f"in {want[0]['trials']} trials since {want[0]['attached']}" in got[0]["title"]
    # each from where it was attached to its last point
    assert [g["vertices"] for g in got] == [1 + len(w["curve"]) for w in want]


def test_dashboard_shows_the_classifiers_scorecards_sorted_by_a_click(
    page: webdriver.Chrome, client: httpx.Client, model_name: str, tmp_path: Path
) -> None:
    create(client, model_name, {"kind": "fusion"})
    learn(client, model_name, 120, seed=6)
    s = settled(client, model_name)
    cards = s["scorecards"]
    assert [c["expert"] for c in cards] == NAMES

    def rows(order: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {
                "expert": c["expert"],
                "retired": c["retired"],
                "trials": f"{c['trials']:,}",
                "error_rate": percent(c["error_rate"]),
                "recent_error_rate": percent(c["recent"]["error_rate"]),
                "agreement": percent(c["agreement"]),
                "spark": len(c["spark"]),
            }
            for c in order
        ]

    def table() -> list[dict[str, Any]] | None:
        got = read_scorecards(page, model_name)
        if got is None or not got["shown"]:
            return None
        return [
            {k: v for k, v in r.items() if k not in ("weight", "spark_vertices")}
            for r in got["rows"]
        ]

    # the input's order until a heading is clicked
    got = wait_for(table, lambda t: t == rows(cards), "the scorecards")
    assert got == rows(cards)
    sparks = read_scorecards(page, model_name)
    assert sparks is not None and all(
        r["spark_vertices"] == max(r["spark"], 2) for r in sparks["rows"]
    )

    def by(key: Any, reverse: bool = False) -> list[dict[str, Any]]:
        """As the page sorts: nulls last, ties in the input's order either way."""

        def rank(c: dict[str, Any]) -> tuple[bool, float]:
            v = key(c)
            return (v is None, 0.0 if v is None else -v if reverse else v)

        return sorted(cards, key=rank)

    sort_scorecards(page, model_name, "error_rate")
    want = rows(by(lambda c: c["error_rate"]))
    assert wait_for(table, lambda t: t == want, "sorted by error") == want
    assert read_scorecards(page, model_name)["sorted"]["error_rate"] == "ascending"
    sort_scorecards(page, model_name, "error_rate")  # again: the other way
    want = rows(by(lambda c: c["error_rate"], reverse=True))
    assert wait_for(table, lambda t: t == want, "sorted by error, descending") == want
    sort_scorecards(page, model_name, "weight")
    want = rows(by(lambda c: c["weight"]))
    assert wait_for(table, lambda t: t == want, "sorted by weight") == want
    got_sorted = read_scorecards(page, model_name)["sorted"]
    assert got_sorted["weight"] == "ascending" and got_sorted["error_rate"] == "none"
    # the sort holds while the figures change
    learn(client, model_name, 60, seed=7)
    s2 = settled(client, model_name)
    cards = s2["scorecards"]
    want = rows(by(lambda c: c["weight"]))
    assert wait_for(table, lambda t: t == want, "sorted by weight, updated") == want
    page.execute_script(
        "document.querySelector(`[data-model='${arguments[0]}'] [data-panel='scorecards']`)"
        ".scrollIntoView()",
        model_name,
    )
    page.save_screenshot(str(tmp_path / "scorecards.png"))
