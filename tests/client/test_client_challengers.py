"""The clients' challenger calls against the real service: attached, read, promoted and
retired over REST and over the stream, sync and async."""

from __future__ import annotations

import asyncio

import pytest

from committee_client import AsyncClient, Challengers, Client, InvalidInput, NotFound

LABELS = ["cat", "dog"]
EXPERTS = {"expert_names": ["a", "b", "c"]}


def _learn(c: Client, name: str, n: int) -> None:
    items = [
        {"instance": {"experts": {"a": y, "b": "dog", "c": "cat"}}, "label": y}
        for y in ("cat", "dog") * (n // 2)
    ]
    for item in items:
        c.learn(name, item["instance"], item["label"])


def test_challengers_over_rest(client: Client, name: str) -> None:
    client.create_model(name, labels=LABELS, experts=EXPERTS, learner="committee")
    got = client.attach_challenger(name, "wm", "weighted-majority")
    assert isinstance(got, Challengers) and got["wm"].trials == 0
    assert got["wm"].learner == {"kind": "weighted-majority"}
    _learn(client, name, 10)
    read = client.challengers(name)
    assert read["wm"].trials == 10 and read["wm"].curve[-1][0] == 10
    assert read["wm"].mistakes <= read["wm"].trials
    with pytest.raises(InvalidInput, match="challenger of that name"):
        client.attach_challenger(name, "wm", "weighted-majority")
    promoted = client.promote_challenger(name, "wm")
    assert promoted.challengers == [] and promoted.learner == {"kind": "weighted-majority"}
    assert client.model(name).learner == {"kind": "weighted-majority"}
    client.attach_challenger(name, "mw", {"kind": "multiclass-winnow"})
    client.retire_challenger(name, "mw")
    assert client.challengers(name).challengers == []
    with pytest.raises(NotFound):
        client.retire_challenger(name, "mw")


def test_challengers_over_the_streams(client: Client, service_url: str, name: str) -> None:
    client.create_model(name, labels=LABELS, experts=EXPERTS, learner="committee")
    with client.stream(name) as s:
        assert s.attach_challenger("wm", "weighted-majority")["wm"].attached == 1
        s.learn({"experts": {"a": "cat", "b": "dog", "c": "cat"}}, "cat")
        assert s.retire_challenger("wm").challengers == []

    async def main() -> Challengers:
        async with AsyncClient(service_url) as c:
            await c.attach_challenger(name, "vr", "vr-combine")
            async with c.stream(name) as s:
                await s.learn({"experts": {"a": "dog", "b": "dog", "c": "cat"}}, "dog")
                return await s.promote_challenger("vr")

    done = asyncio.run(main())
    assert done.learner == {"kind": "vr-combine"} and done.challengers == []
    assert client.challengers(name).learner == {"kind": "vr-combine"}
