"""In a real headless Chromium: the dashboard while the service has API keys (a read key
asked for in the page, kept in the tab's session storage only, nothing of the models shown
without one, a refused key dropped), and a page of another site that tries to act on a
keyless service (a ``text/plain`` form POST, a ``no-cors`` fetch, a WebSocket) and fails."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from _browser import chromium, read_card, wait_for
from _server import ServerThread
from selenium import webdriver
from selenium.webdriver.common.by import By
from test_dashboard import expected, settled, shown

from app.core.settings import Settings

EVERY_MS = 200
NAME = "secret-model"
LABEL = "b="  # the "=" a text/plain form puts between an input's name and its value
MODEL = {
    "labels": ["a", LABEL],
    "input": {"attributes": {"n_features": 4}},
    "learner": {"kind": "winnow"},
}
# a separable stream that winnow gets wrong a few times before it has learned it
TRIALS = [
    {"instance": {"features": f}, "label": LABEL if f[0] else "a"}
    for f in ([1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0], [0, 0, 1, 1]) * 5
]

_PAGE = """
const text = (id) => document.getElementById(id).textContent.trim();
return {
  form: !document.getElementById("key-form").hidden,
  note: text("key-note"),
  problem: document.getElementById("problem").hidden ? "" : text("problem"),
  signOut: !document.getElementById("sign-out").hidden,
  status: document.getElementById("status").dataset.state,
  cards: [...document.querySelectorAll("[data-model]")].map((el) => el.dataset.model),
  count: text("model-count"),
  text: document.querySelector("main").innerText,
  session: sessionStorage.getItem("committee.api-key"),
  local: localStorage.length,
  cookie: document.cookie,
};
"""


@pytest.fixture(scope="module")
def chrome() -> Iterator[webdriver.Chrome]:
    with chromium() as driver:
        yield driver


@pytest.fixture
def browser(chrome: webdriver.Chrome, server: ServerThread) -> Iterator[webdriver.Chrome]:
    """Chromium in a tab of this test's own: its session storage starts empty even where
    a service gets a port an earlier test's service had. The tab closes before the
    service stops, so that no event stream of the page holds the service's shutdown."""
    first = chrome.current_window_handle
    chrome.switch_to.new_window("tab")
    try:
        yield chrome
    finally:
        chrome.close()
        chrome.switch_to.window(first)


@pytest.fixture
def server(redis_url: str, redis_prefix: str) -> Iterator[ServerThread]:
    """A service of this test's own (its keys are its own), keyless until a test makes one."""
    with ServerThread(Settings(redis_url=redis_url, key_prefix=redis_prefix, warmup=False)) as s:
        yield s


@pytest.fixture
def admin(server: ServerThread) -> Iterator[httpx.Client]:
    """A client with the service's first key, an admin one: auth is on from then on."""
    with httpx.Client(base_url=server.url, timeout=30) as c:
        r = c.post("/v1/keys", json={"scope": "admin", "name": "test admin"})
        assert r.status_code == 201, r.text
        c.headers["Authorization"] = f"Bearer {r.json()['key']}"
        assert httpx.get(f"{server.url}/v1/models").status_code == 401
        yield c


def page(driver: webdriver.Chrome) -> dict[str, Any]:
    """What the dashboard shows besides the cards' contents, and what the tab stores."""
    got: dict[str, Any] = driver.execute_script(_PAGE)
    return got


def open_dashboard(driver: webdriver.Chrome, url: str) -> None:
    driver.get(f"{url}/?every={EVERY_MS}")


def enter(driver: webdriver.Chrome, key: str) -> None:
    driver.find_element(By.ID, "key-input").send_keys(key)
    driver.find_element(By.CSS_SELECTOR, "#key-form button[type=submit]").click()


def locked(driver: webdriver.Chrome, what: str, note: str = "") -> dict[str, Any]:
    """The page once it asks for a key (with ``note`` in its message); asserts that it
    then shows nothing of the models and keeps no key."""
    got = wait_for(lambda: page(driver), lambda p: p["form"] and note in p["note"], what)
    assert got["form"] and note in got["note"], got
    assert got["cards"] == [] and got["count"] == "0" and NAME not in got["text"], got
    assert got["session"] is None and not got["signOut"] and got["status"] == "locked", got
    return got


def follow(driver: webdriver.Chrome, stats: dict[str, Any]) -> None:
    """Wait until the card shows ``stats`` as the dashboard's own test reads them."""
    want = expected(stats)
    card = wait_for(lambda: read_card(driver, NAME), lambda c: shown(c) == want, "the card")
    assert shown(card) == want


def make_model(c: httpx.Client) -> dict[str, Any]:
    """The model, taught ``TRIALS``; its settled stats."""
    assert c.post("/v1/models", json={"name": NAME, **MODEL}).status_code == 201
    r = c.post(f"/v1/models/{NAME}/learn/batch", json={"items": TRIALS})
    assert r.status_code == 200, r.text
    s = settled(c, NAME)
    assert s["version"] == len(TRIALS) and s["mistakes"] > 0, s
    return s


def make_key(c: httpx.Client, scope: str) -> dict[str, Any]:
    r = c.post("/v1/keys", json={"scope": scope, "name": f"test {scope}"})
    assert r.status_code == 201, r.text
    key: dict[str, Any] = r.json()
    return key


# ---- a read key -------------------------------------------------------------------------


def test_without_a_key_nothing_shows_and_a_read_key_shows_the_models(
    browser: webdriver.Chrome, server: ServerThread, admin: httpx.Client
) -> None:
    stats = make_model(admin)
    read = make_key(admin, "read")["key"]

    open_dashboard(browser, server.url)
    locked(browser, "the key form")
    field = browser.find_element(By.ID, "key-input")
    assert field.get_attribute("type") == "password" and field.accessible_name == "Read key"
    submit = browser.find_element(By.CSS_SELECTOR, "#key-form button[type=submit]")
    assert submit.accessible_name == "Show the models"
    assert NAME not in browser.page_source

    enter(browser, read)
    follow(browser, stats)
    shown_ = page(browser)
    assert not shown_["form"] and shown_["signOut"] and shown_["problem"] == ""
    # the tab's session storage holds the key, and nothing else does
    assert shown_["session"] == read and shown_["local"] == 0 and shown_["cookie"] == ""
    assert read not in browser.current_url and read not in browser.page_source

    browser.refresh()  # the same tab keeps the key
    follow(browser, stats)
    assert not page(browser)["form"]

    browser.find_element(By.ID, "sign-out").click()
    locked(browser, "the form after signing out", note="Signed out")
    browser.refresh()  # and it is gone for good
    locked(browser, "the form after a reload")


def test_a_refused_key_is_dropped_and_asked_for_again(
    browser: webdriver.Chrome, server: ServerThread, admin: httpx.Client
) -> None:
    stats = make_model(admin)
    open_dashboard(browser, server.url)
    locked(browser, "the key form")

    enter(browser, "cmk_not-a-key")
    locked(browser, "the refusal", note="Key refused")

    read = make_key(admin, "read")
    enter(browser, read["key"])
    follow(browser, stats)
    # revoked while in use: the next poll's 401 drops the key and clears the page
    assert admin.delete(f"/v1/keys/{read['id']}").status_code == 204
    locked(browser, "the refusal of a revoked key", note="Key refused")


def test_a_403_or_404_is_said_in_words(
    browser: webdriver.Chrome, server: ServerThread, admin: httpx.Client
) -> None:
    # a read key may GET all the dashboard reads, and the listing holds only the models the
    # key may see, so the service never answers the page 403 or 404: its fetch is made to
    stats = make_model(admin)
    open_dashboard(browser, server.url)
    locked(browser, "the key form")
    enter(browser, make_key(admin, "read")["key"])
    follow(browser, stats)
    answer = """
    window.realFetch ??= window.fetch;
    const [status, detail] = arguments;
    window.fetch = status === null ? window.realFetch : async () =>
      new Response(JSON.stringify({ detail }), {
        status, headers: { "content-type": "application/json" },
      });
    """
    for status, words in ((403, "may not read the models"), (404, "not found")):
        browser.execute_script(answer, status, f"told {status}")
        got = wait_for(lambda: page(browser), lambda p: p["problem"] != "", f"the {status}")
        problem = got["problem"]
        assert f"HTTP {status}: told {status}" in problem and words in problem, got
        assert got["cards"] == [] and NAME not in got["text"] and not got["form"], got
        assert got["status"] == "error" and got["session"] is not None, got
        browser.execute_script(answer, None, "")
        follow(browser, stats)
        assert page(browser)["problem"] == ""


def test_while_auth_is_off_the_page_shows_the_models_and_no_form(
    browser: webdriver.Chrome, server: ServerThread
) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        stats = make_model(c)
    open_dashboard(browser, server.url)
    follow(browser, stats)
    got = page(browser)
    assert not got["form"] and not got["signOut"] and got["problem"] == "", got
    assert got["status"] == "live" and got["session"] is None, got


# ---- another site -------------------------------------------------------------------------

# SERVICE is where the page sends its POSTs, WS the stream's base URL. A text/plain form
# sends "name=value" unescaped, so the input below makes the body the JSON of a learn call.
ATTACK = """<!doctype html>
<html><body>
<form id="form" method="POST" enctype="text/plain" target="sink"
      action="SERVICE/v1/models/NAME/learn">
  <input name='{"instance": {"features": [1, 0, 1, 0]}, "label": "b' value='"}'>
</form>
<iframe name="sink"></iframe>
<script>
  const results = (window.results = { form: "pending", fetch: "pending", ws: [] });
  const trial = { instance: { features: [1, 0, 1, 0] }, label: "b=" };
  document.querySelector("iframe").onload = () => (results.form = "answered");
  document.getElementById("form").submit();
  fetch("SERVICE/v1/models/NAME/learn", {
    method: "POST",
    mode: "no-cors",
    headers: { "Content-Type": "text/plain" },
    body: JSON.stringify(trial),
  }).then(() => (results.fetch = "sent"), () => (results.fetch = "failed"));
  const ws = new WebSocket("WS/v1/models/NAME/stream");
  ws.onopen = () => {
    results.ws.push("open");
    ws.send(JSON.stringify({ op: "learn", id: 1, ...trial }));
  };
  ws.onmessage = (m) => {
    results.ws.push(`answered ${m.data}`);
    ws.close();
  };
  ws.onerror = () => results.ws.push("error");
  ws.onclose = (e) => results.ws.push(`closed ${e.code}`);
</script>
</body></html>
"""


def attack_page(http_base: str, ws_base: str) -> str:
    return ATTACK.replace("SERVICE", http_base).replace("WS", ws_base).replace("NAME", NAME).strip()


class Site:
    """Another origin: a loopback port of its own serving one page at ``/`` and keeping
    the bodies POSTed to it (as ``(content type, body)``)."""

    def __init__(self) -> None:
        self.page = ""
        self.posted: list[tuple[str, bytes]] = []
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._send(site.page.encode())

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                site.posted.append((self.headers.get("content-type", ""), body))
                self._send(b"")

            def _send(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Site:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def results(driver: webdriver.Chrome) -> dict[str, Any]:
    """What the attack page saw once its three attempts are over."""

    def read() -> dict[str, Any]:
        got: dict[str, Any] = driver.execute_script("return window.results ?? {}")
        return got

    def over(r: dict[str, Any]) -> bool:
        closed = any(e.startswith("closed") for e in r.get("ws", []))
        return closed and r.get("form") == "answered" and r.get("fetch") != "pending"

    got = wait_for(read, over, "the page's attempts")
    assert over(got), got
    return got


def learned(c: httpx.Client) -> tuple[int, int]:
    """The model's log version and its learned counter."""
    s = settled(c, NAME)
    return s["version"], s["learned"]


def test_a_page_of_another_site_cannot_act_on_a_keyless_service(
    browser: webdriver.Chrome, server: ServerThread
) -> None:
    ws_base = server.url.replace("http://", "ws://")
    with httpx.Client(base_url=server.url, timeout=30) as c, Site() as site:
        assert c.post("/v1/models", json={"name": NAME, **MODEL}).status_code == 201

        site.page = attack_page(server.url, ws_base)
        browser.get(site.url)
        got = results(browser)
        assert got["fetch"] == "sent"  # a no-cors POST leaves the browser; the guard refuses it
        assert not any(e.startswith(("open", "answered")) for e in got["ws"]), got
        assert learned(c) == (0, 0)

        # control: the same bodies, POSTed to the site itself, then sent as JSON, do learn
        site.page = attack_page(site.url, ws_base)
        browser.get(site.url)
        results(browser)
        kinds = sorted(ctype.split(";")[0] for ctype, _ in site.posted)
        assert kinds == ["text/plain", "text/plain"], site.posted
        form = b'{"instance": {"features": [1, 0, 1, 0]}, "label": "b="}\r\n'
        assert form in [body for _, body in site.posted], site.posted
        json_type = {"content-type": "application/json"}
        for _, body in site.posted:
            r = c.post(f"/v1/models/{NAME}/learn", content=body, headers=json_type)
            assert r.status_code == 200, (body, r.text)
        assert learned(c) == (2, 2)

        # control: the same page in a document of the service's own origin opens the stream
        # (and learns by it); its form and text/plain fetch are refused there too
        browser.get(f"{server.url}/healthz")
        browser.execute_script(
            "document.open(); document.write(arguments[0]); document.close();",
            attack_page(server.url, ws_base),
        )
        got = results(browser)
        assert got["ws"][0] == "open" and got["ws"][1].startswith("answered"), got
        assert learned(c) == (3, 3)
