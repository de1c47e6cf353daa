"""``GET /v1/models/{name}/events`` over real HTTP: a model's trials, changes, alerts and
challengers pushed as server-sent events; a reconnection with ``Last-Event-ID`` gets
exactly what came after it; keys, tenancy and the per-worker bound as for the stats."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from app.core.settings import Settings

EVERY = 100  # ms between the stream's reads of the model
TIMEOUT = httpx.Timeout(30.0)  # a stream that says nothing for this long fails the test


@dataclass(frozen=True)
class Ev:
    kind: str  # "event:", or "comment" for a keep-alive line
    id: int | None
    data: Any


def parse(lines: Iterator[str]) -> Iterator[Ev]:
    """The events of a ``text/event-stream``, comments included (as kind "comment")."""
    kind, eid, data = "message", None, []
    for line in lines:
        if line == "":
            if data:
                yield Ev(kind, eid, orjson.loads("\n".join(data)))
            kind, eid, data = "message", None, []
        elif line.startswith(":"):
            yield Ev("comment", None, line[1:].strip())
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                kind = value
            elif field == "id":
                eid = int(value)
            elif field == "data":
                data.append(value)


def read_until(
    c: httpx.Client,
    name: str,
    done: Callable[[list[Ev]], bool],
    headers: dict[str, str] | None = None,
    **params: Any,
) -> list[Ev]:
    """The events of one connection, read until ``done`` holds of those read (or the
    stream ends), keep-alives left out unless ``done`` wants them."""
    got: list[Ev] = []
    query = {"every": EVERY, **params}
    with c.stream(
        "GET", f"/v1/models/{name}/events", params=query, headers=headers, timeout=TIMEOUT
    ) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for e in parse(r.iter_lines()):
            got.append(e)
            if done(got) or e.kind == "end":
                break
    return got


def at_version(v: int) -> Callable[[list[Ev]], bool]:
    """Read until a progress event describes version ``v`` whole: its summary (weights,
    scorecards), written by a worker every half second or so, included."""
    return lambda got: any(
        e.kind == "progress" and e.data["version"] >= v and e.data["summary_version"] >= v
        for e in got
    )


def discrete(events: list[Ev]) -> list[tuple[str, int | None, Any]]:
    return [(e.kind, e.id, e.data) for e in events if e.kind in ("change", "alert")]


# ---- a model ---------------------------------------------------------------------------


def _model(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "labels": ["a", "b"],
        "input": {"experts": {"expert_names": ["x", "y"]}},
        "learner": {"kind": "weighted-majority"},
    }


def _trials(rng: np.random.Generator, n: int, error: float) -> list[dict[str, Any]]:
    """``n`` trials whose experts both vote the wrong label with probability ``error``."""
    out = []
    for _ in range(n):
        y = "a" if rng.random() < 0.5 else "b"
        vote = ("b" if y == "a" else "a") if rng.random() < error else y
        out.append({"instance": {"experts": {"x": vote, "y": vote}}, "label": y})
    return out


def _learn(c: httpx.Client, name: str, items: list[dict[str, Any]]) -> int:
    version = 0
    for at in range(0, len(items), 500):
        got = c.post(f"/v1/models/{name}/learn/batch", json={"items": items[at : at + 500]})
        assert got.status_code == 200, got.text
    version = c.get(f"/v1/models/{name}").json()["version"]
    return int(version)


@pytest.fixture(scope="module")
def history(api_url: str) -> tuple[str, int, list[Ev]]:
    """A model with trials, a change of its input, a drift alert, a challenger attached
    and later figures of it; the events one connection saw of it all, from its
    creation on (``from=0``), up to its last version."""
    name = f"ev-{uuid.uuid4().hex[:12]}"
    rng = np.random.default_rng(11)
    with httpx.Client(base_url=api_url, timeout=60) as c:
        assert c.post("/v1/models", json=_model(name)).status_code == 201
        _learn(c, name, _trials(rng, 500, 0.1))
        r = c.post(f"/v1/models/{name}/experts", json={"add": ["z"]})
        assert r.status_code == 200, r.text
        r = c.post(
            f"/v1/models/{name}/challengers",
            json={"name": "wm2", "learner": {"kind": "weighted-majority", "beta": 0.3}},
        )
        assert r.status_code in (200, 201), r.text
        _learn(c, name, _trials(rng, 2_500, 0.1) + _trials(rng, 1_000, 0.45))
        last = _learn(c, name, _trials(rng, 100, 0.45))
        alerts = c.get(f"/v1/models/{name}/alerts").json()["alerts"]
        assert alerts, "the drift watch raised no alert: the test's stream is too calm"
        # raised a moment after they are detected: each marks the curve then
        for _ in range(600):
            changes = c.get(f"/v1/models/{name}/stats").json()["changes"]
            if sum(ch["what"].startswith("drift ") for ch in changes) == len(alerts):
                break
            time.sleep(0.05)
        events = read_until(c, name, at_version(last), **{"from": 0})
    return name, last, events


def test_events_carry_trials_changes_alerts_and_challengers(
    client: httpx.Client, history: tuple[str, int, list[Ev]]
) -> None:
    name, last, events = history
    kinds = [e.kind for e in events]
    assert kinds[-1] in ("progress", "challengers"), kinds
    changes = [e for e in events if e.kind == "change"]
    assert [(c.data["kind"], c.data.get("change")) for c in changes] == [
        ("change", {"experts": {"add": ["z"]}}),
        ("challenger", None),
    ]
    assert changes[1].data["challenger"]["op"] == "attach"
    assert changes[1].data["challenger"]["name"] == "wm2"
    assert all(c.id == c.data["version"] for c in changes)
    alerts = [e for e in events if e.kind == "alert"]
    listed = client.get(f"/v1/models/{name}/alerts").json()["alerts"]
    assert [{k: v for k, v in a.data.items() if k != "version"} for a in alerts] == listed
    assert all(a.id == a.data["seq"] for a in alerts)
    # in log order, each id the log position the event reflects
    ids = [e.id for e in events if e.id is not None]
    assert ids == sorted(ids)
    progress = [e for e in events if e.kind == "progress"]
    assert progress[-1].data == client.get(f"/v1/models/{name}/stats").json()
    assert progress[-1].id == last and progress[-1].data["version"] == last
    assert progress[-1].data["mistakes"] > 0 and progress[-1].data["window"]["trials"] > 0
    # one progress event a read at most: coalesced, never one a trial
    assert len(progress) < last / 10
    figures = [e for e in events if e.kind == "challengers"]
    assert figures and figures[-1].data["challengers"][0]["name"] == "wm2"
    assert figures[-1].data == client.get(f"/v1/models/{name}/challengers").json()


def test_a_reconnection_gets_exactly_the_rest(
    client: httpx.Client, history: tuple[str, int, list[Ev]]
) -> None:
    name, last, events = history
    seen = discrete(events)
    positions = sorted({i for _, i, _ in seen if i is not None})
    for after in [0, positions[0] - 1, *positions, last - 1]:
        got = read_until(client, name, at_version(last), {"Last-Event-ID": str(after)})
        assert discrete(got) == [d for d in seen if d[1] is not None and d[1] > after], after
        assert got[-1].kind in ("progress", "challengers")
    # the query's from, for clients that cannot set headers; the header wins over it
    got = read_until(client, name, at_version(last), **{"from": positions[0]})
    assert discrete(got) == [d for d in seen if d[1] is not None and d[1] > positions[0]]
    got = read_until(
        client, name, at_version(last), {"Last-Event-ID": str(last - 1)}, **{"from": 0}
    )
    assert discrete(got) == [d for d in seen if d[1] is not None and d[1] > last - 1]


@pytest.fixture(scope="module")
def quiet_url(api_settings: Settings, server_thread: Any) -> Iterator[str]:
    """A server of its own whose streams send keep-alives often and allow 2 at once."""
    update = {
        "key_prefix": f"t-{uuid.uuid4().hex[:12]}",
        "events_heartbeat": 0.2,
        "events_max_connections": 2,
    }
    with server_thread(api_settings.model_copy(update=update)) as server:
        yield server.url


def test_a_client_at_the_head_gets_nothing_but_keep_alives(quiet_url: str) -> None:
    name = f"ev-{uuid.uuid4().hex[:12]}"
    with httpx.Client(base_url=quiet_url, timeout=60) as c:
        assert c.post("/v1/models", json=_model(name)).status_code == 201
        last = _learn(c, name, _trials(np.random.default_rng(1), 200, 0.1))
        for _ in range(600):  # the statistics settled: nothing left to say of the model
            s = c.get(f"/v1/models/{name}/stats").json()
            if s["folded"] == s["version"] == s["summary_version"] == last:
                break
            time.sleep(0.05)
        keep_alives = lambda got: sum(e.kind == "comment" for e in got) >= 3  # noqa: E731
        got = read_until(c, name, keep_alives, {"Last-Event-ID": str(last)})
        assert [e.kind for e in got] == ["comment"] * 3
        # without an id: the model as it is now first
        got = read_until(c, name, keep_alives)
        assert [e.kind for e in got if e.kind != "comment"] == ["progress"]
        assert got[0].kind == "progress" and got[0].id == last


def test_a_stream_ends_when_its_lifetime_is_over_not_at_its_next_read(
    api_settings: Settings, server_thread: Any
) -> None:
    """``events_max_seconds`` ends a stream on time, however long its interval."""
    name = f"ev-{uuid.uuid4().hex[:12]}"
    update = {"key_prefix": f"t-{uuid.uuid4().hex[:12]}", "events_max_seconds": 0.5}
    with (
        server_thread(api_settings.model_copy(update=update)) as server,
        httpx.Client(base_url=server.url, timeout=60) as c,
    ):
        assert c.post("/v1/models", json=_model(name)).status_code == 201
        start = time.monotonic()
        got = read_until(c, name, lambda got: False, every=20_000)
        took = time.monotonic() - start
    assert [e.kind for e in got] == ["progress", "end"]
    assert got[-1].data == {"reason": "lifetime", "detail": "0.5 s (events_max_seconds)"}
    # not 20 s: the interval's wait is cut short by the stream's end
    assert 0.5 <= took < 10, took


def test_positions_beyond_the_log_or_malformed_are_refused_by_name(client: httpx.Client) -> None:
    name = f"ev-{uuid.uuid4().hex[:12]}"
    assert client.post("/v1/models", json=_model(name)).status_code == 201
    _learn(client, name, _trials(np.random.default_rng(2), 10, 0.1))
    url = f"/v1/models/{name}/events"
    for value in ("abc", "-1", "1.5", "", "9" * 30):
        r = client.get(url, headers={"Last-Event-ID": value})
        assert r.status_code == 422, (value, r.text)
        assert r.json()["detail"][0]["loc"] == ["header", "Last-Event-ID"], r.text
    r = client.get(url, headers={"Last-Event-ID": "11"})
    assert r.status_code == 422
    [err] = r.json()["detail"]
    assert err["loc"] == ["header", "Last-Event-ID"] and "ends at 10" in err["msg"]
    r = client.get(url, params={"from": 11})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "from"]
    r = client.get(url, params={"every": 1})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "every"]
    assert "events_min_every_ms" in r.text
    assert client.get("/v1/models/no-such-model/events").status_code == 404


def test_streams_beyond_the_worker_bound_are_refused(quiet_url: str) -> None:
    name = f"ev-{uuid.uuid4().hex[:12]}"
    with httpx.Client(base_url=quiet_url, timeout=60) as c:
        assert c.post("/v1/models", json=_model(name)).status_code == 201
        url = f"/v1/models/{name}/events"
        with c.stream("GET", url) as a, c.stream("GET", url) as b:
            assert (a.status_code, b.status_code) == (200, 200)
            # both are being served (each line iterator kept: dropping one closes its stream)
            lines = [a.iter_lines(), b.iter_lines()]
            assert [next(each).startswith("retry:") for each in lines] == [True, True]
            r = c.get(url, timeout=10)
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert r.json()["limit"] == "events_max_connections" and r.json()["max"] == 2
        # once they are gone, there is room again (as soon as the server saw them go)
        for _ in range(200):
            with c.stream("GET", url) as r:
                if r.status_code == 200:
                    break
                assert r.status_code == 503
        assert r.status_code == 200


def test_the_stream_ends_when_the_model_is_deleted(client: httpx.Client) -> None:
    name = f"ev-{uuid.uuid4().hex[:12]}"
    assert client.post("/v1/models", json=_model(name)).status_code == 201
    with client.stream("GET", f"/v1/models/{name}/events", params={"every": EVERY}) as r:
        events = parse(r.iter_lines())
        first = next(events)
        assert first.kind == "progress"
        assert client.delete(f"/v1/models/{name}").status_code == 204
        rest = list(events)  # to the stream's end
    assert rest[-1].kind == "end" and rest[-1].data["reason"] == "deleted", rest
    assert rest[-1].id is None


# ---- keys ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(api_settings: Settings, server_thread: Any) -> Iterator[tuple[str, dict[str, str]]]:
    """A server of its own with auth on: its URL and keys by kind (admin, a read key
    confined to ``acme-*``, another tenant's admin), and model ``acme-1``."""
    settings = api_settings.model_copy(update={"key_prefix": f"t-{uuid.uuid4().hex[:12]}"})
    with server_thread(settings) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        r = c.post("/v1/keys", json={"scope": "admin", "name": "root"})
        assert r.status_code == 201, r.text
        keys = {"admin": r.json()["key"]}
        c.headers["Authorization"] = f"Bearer {keys['admin']}"
        for kind, body in {
            "read": {"scope": "read", "models": "acme-*"},
            "other": {"scope": "admin", "models": "other-*", "name": "other tenant"},
        }.items():
            r = c.post("/v1/keys", json=body)
            assert r.status_code == 201, r.text
            keys[kind] = r.json()["key"]
        assert c.post("/v1/models", json=_model("acme-1")).status_code == 201
        yield server.url, keys


def test_keys_and_tenancy_as_for_the_stats(keyed: tuple[str, dict[str, str]]) -> None:
    url, keys = keyed
    with httpx.Client(base_url=url, timeout=30) as c:
        for path in ("/v1/models/acme-1/stats", "/v1/models/acme-1/events"):
            bearer = {k: {"Authorization": f"Bearer {v}"} for k, v in keys.items()}
            assert c.get(path).status_code == 401
            assert c.get(path, headers={"Authorization": "Bearer nope"}).status_code == 401
            r = c.get(path, headers=bearer["other"])
            assert r.status_code == 404 and r.json() == {"detail": "model 'acme-1' does not exist"}
        got = read_until(
            c, "acme-1", lambda got: bool(got), {"Authorization": f"Bearer {keys['read']}"}
        )
        assert got[0].kind == "progress"


def test_the_stream_ends_when_its_key_is_revoked(keyed: tuple[str, dict[str, str]]) -> None:
    url, keys = keyed
    with httpx.Client(base_url=url, timeout=30) as c:
        c.headers["Authorization"] = f"Bearer {keys['admin']}"
        r = c.post("/v1/keys", json={"scope": "read", "name": "short-lived"})
        assert r.status_code == 201, r.text
        key, key_id = r.json()["key"], r.json()["id"]
        headers = {"Authorization": f"Bearer {key}"}
        with c.stream(
            "GET", "/v1/models/acme-1/events", params={"every": EVERY}, headers=headers
        ) as r:
            assert r.status_code == 200
            events = parse(r.iter_lines())
            assert next(events).kind == "progress"
            assert c.delete(f"/v1/keys/{key_id}").status_code == 204
            rest = list(events)
        assert rest[-1].kind == "end" and rest[-1].data["reason"] == "revoked", rest
        assert c.get("/v1/models/acme-1/events", headers=headers).status_code == 401
