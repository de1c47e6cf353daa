"""The clients' ``events``: a model's events as they happen, resumed after a dropped
connection from the last id, nothing lost or given twice."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from _server import ServerThread

from app.core.settings import Settings
from committee_client import AsyncClient, Client, Event, NotFound

MODEL: dict[str, Any] = {
    "labels": ["a", "b"],
    "experts": {"expert_names": ["x", "y"]},
    "learner": {"kind": "weighted-majority"},
}


@pytest.fixture
def short_lived(redis_url: str) -> Iterator[str]:
    """A service of its own whose event streams end after a moment (their lifetime)."""
    prefix = f"ce-{uuid.uuid4().hex[:12]}"
    settings = Settings(redis_url=redis_url, key_prefix=prefix, events_max_seconds=0.3)
    with ServerThread(settings) as server:
        yield server.url


def _settled(c: Client, name: str) -> int:
    """The model's version once its statistics have caught up with it."""
    for _ in range(600):
        s = c.stats(name)
        if s.folded == s.version == s.summary_version:
            return s.version
        time.sleep(0.05)
    raise AssertionError(f"the statistics of {name} did not settle")


def _teach(c: Client, name: str, n: int) -> int:
    items = [({"experts": {"x": "a", "y": "b"}}, "a" if i % 3 else "b") for i in range(n)]
    c.learn_batch(name, items)
    return c.model(name).version


def _until_version(events: Any, version: int) -> list[Event]:
    got = []
    for e in events:
        got.append(e)
        if e.kind == "progress" and e.data["version"] >= version:
            return got
    raise AssertionError(f"the events ended before version {version}: {got}")


def test_events_follow_the_model_and_resume_after_an_id(client: Client, name: str) -> None:
    client.create_model(name, **MODEL)
    first = _teach(client, name, 20)
    events = client.events(name, every=100)
    got = _until_version(events, first)
    assert got[0].kind == "progress" and got[0].id == first
    client.change_experts(name, add=["z"])
    last = _teach(client, name, 30)
    got = _until_version(events, last)
    [change] = [e for e in got if e.kind == "change"]
    assert change.data["change"] == {"experts": {"add": ["z"]}} and change.id == first + 1
    events.close()  # type: ignore[attr-defined]
    # from an id: the change again only when it came after it
    again = _until_version(client.events(name, first, every=100), last)
    assert [e.id for e in again if e.kind == "change"] == [first + 1]
    after = _until_version(client.events(name, first + 1, every=100), last)
    assert [e for e in after if e.kind == "change"] == []


def test_the_events_end_when_the_model_is_deleted(client: Client, name: str) -> None:
    client.create_model(name, **MODEL)
    events = client.events(name, every=100)
    assert next(events).kind == "progress"
    client.delete_model(name)
    rest = list(events)
    assert rest[-1].kind == "end" and rest[-1].data["reason"] == "deleted"
    with pytest.raises(NotFound):
        next(client.events(name))


def test_the_async_client_resumes_after_a_lifetime_end(short_lived: str, name: str) -> None:
    with Client(short_lived, timeout=30) as c:
        c.create_model(name, **MODEL)
        c.learn_batch(name, [({"experts": {"x": "a"}}, "a")] * 5)
        assert _settled(c, name) == 5

    async def go() -> list[Event]:
        async with AsyncClient(short_lived, timeout=30) as c:
            got: list[Event] = []
            async for e in c.events(name, every=100):
                got.append(e)
                if sum(g.kind == "end" for g in got) >= 2:  # two lifetimes: resumed twice
                    break
            return got

    got = asyncio.run(go())
    ends = [e for e in got if e.kind == "end"]
    assert [e.data["reason"] for e in ends] == ["lifetime", "lifetime"]
    # the model's progress once: the resumed streams knew it already
    assert [e.kind for e in got if e.kind != "end"] == ["progress"]
    assert got[0].id == 5 and got[0].data["version"] == 5
