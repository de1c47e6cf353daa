"""Hundreds of concurrent clients against ``committee serve --workers 4``.

The trial log in Redis is the truth: after the load, replaying it in a fresh model must
give exactly the state the service exports, the counters it reports, and the answer of
every request it acknowledged. Racing duplicate labels of one trial are applied once.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
from _procs import (
    Service,
    assert_same_state,
    check_answers,
    learn_entries,
    majority_model,
    majority_payloads,
    replay,
    wait_folded,
)

CLIENTS = 200
POOLS = 10  # of at most 100 connections each (httpx's default)
ROUNDS = 2
SAME_LABEL_RACES = 8  # trials labelled by many clients with the same label
SAME_LABEL_RACERS = 12
OTHER_LABEL_RACES = 8  # trials labelled by many clients with different labels
RACERS_PER_LABEL = 3


class Load:
    """What the clients sent and what the service acknowledged (200) for it."""

    def __init__(self, base_urls: list[str], name: str, seed: int) -> None:
        self.base_urls = base_urls
        self.name = name
        self.rng = random.Random(seed)
        self.data = iter(majority_payloads(20_000, np.random.default_rng(seed)))
        self.predicted: list[tuple[dict[str, Any], dict[str, Any]]] = []  # (payload, answer)
        self.labelled: list[tuple[str, int, dict[str, Any]]] = []  # (trial id, label, answer)
        self.learned: list[tuple[dict[str, Any], int, dict[str, Any]]] = []
        self.unexpected: list[str] = []
        self.races: list[tuple[str, list[tuple[int, int, Any]]]] = []  # (id, [(y, code, body)])

    def path(self, tail: str) -> str:
        return f"/v1/models/{self.name}/{tail}"

    def ok(self, r: httpx.Response) -> dict[str, Any] | None:
        if r.status_code != 200:
            self.unexpected.append(f"{r.request.url.path}: {r.status_code} {r.text}")
            return None
        body: dict[str, Any] = r.json()
        return body

    async def predict_label(self, c: httpx.AsyncClient) -> None:
        x, y = next(self.data)
        p = self.ok(await c.post(self.path("predict"), json={"instance": x}))
        if p is None:
            return
        self.predicted.append((x, p))
        body = {"trial_id": p["trial_id"], "label": y}
        got = self.ok(await c.post(self.path("label"), json=body))
        if got is not None:
            self.labelled.append((p["trial_id"], y, got))

    async def predict_label_batch(self, c: httpx.AsyncClient) -> None:
        items = [next(self.data) for _ in range(3)]
        body = {"items": [{"instance": x} for x, _ in items]}
        p = self.ok(await c.post(self.path("predict/batch"), json=body))
        if p is None:
            return
        ids = []
        for (x, y), item in zip(items, p["items"], strict=True):
            if item["result"] is None:
                self.unexpected.append(f"predict/batch item: {item}")
                continue
            self.predicted.append((x, item["result"]))
            ids.append((item["result"]["trial_id"], y))
        labels = {"items": [{"trial_id": t, "label": y} for t, y in ids]}
        got = self.ok(await c.post(self.path("label/batch"), json=labels))
        if got is None:
            return
        for (t, y), item in zip(ids, got["items"], strict=True):
            if item["result"] is None:
                self.unexpected.append(f"label/batch item: {item}")
            else:
                self.labelled.append((t, y, item["result"]))

    async def learn(self, c: httpx.AsyncClient) -> None:
        x, y = next(self.data)
        got = self.ok(await c.post(self.path("learn"), json={"instance": x, "label": y}))
        if got is not None:
            self.learned.append((x, y, got))

    async def learn_batch(self, c: httpx.AsyncClient) -> None:
        items = [next(self.data) for _ in range(5)]
        body = {"items": [{"instance": x, "label": y} for x, y in items]}
        got = self.ok(await c.post(self.path("learn/batch"), json=body))
        if got is None:
            return
        for (x, y), item in zip(items, got["items"], strict=True):
            if item["result"] is None:
                self.unexpected.append(f"learn/batch item: {item}")
            else:
                self.learned.append((x, y, item["result"]))

    async def client(self, c: httpx.AsyncClient) -> None:
        ops = [self.predict_label, self.predict_label_batch, self.learn, self.learn_batch]
        for _ in range(ROUNDS):
            await self.rng.choice(ops)(c)

    async def race(self, c: httpx.AsyncClient, trial_id: str, labels: list[int]) -> None:
        """Many clients predict one trial (same id, same instance), then label it at once."""
        x, _ = next(self.data)
        body = {"instance": x, "trial_id": trial_id}
        answers = await asyncio.gather(*(c.post(self.path("predict"), json=body) for _ in range(8)))
        for r in answers:
            p = self.ok(r)
            if p is not None:
                self.predicted.append((x, p))
        if len({r.text for r in answers}) != 1:
            self.unexpected.append(f"{trial_id}: duplicate predictions differ: {answers}")
        replies = await asyncio.gather(
            *(c.post(self.path("label"), json={"trial_id": trial_id, "label": y}) for y in labels)
        )
        self.races.append(
            (trial_id, [(y, r.status_code, r.json()) for y, r in zip(labels, replies, strict=True)])
        )
        for y, r in zip(labels, replies, strict=True):
            if r.status_code == 200:
                self.labelled.append((trial_id, y, r.json()))

    async def run(self) -> None:
        # several small connection pools: httpx spends much time in a large one
        async with contextlib.AsyncExitStack() as stack:
            pools = [
                await stack.enter_async_context(
                    httpx.AsyncClient(base_url=self.base_urls[i % len(self.base_urls)], timeout=120)
                )
                for i in range(POOLS)
            ]
            tasks = [self.client(pools[i % POOLS]) for i in range(CLIENTS)]
            for j in range(SAME_LABEL_RACES):
                racers = [j % 5] * SAME_LABEL_RACERS
                tasks.append(self.race(pools[j % POOLS], f"same-{j}", racers))
            for j in range(OTHER_LABEL_RACES):
                racers = [y for y in range(5) for _ in range(RACERS_PER_LABEL)]
                self.rng.shuffle(racers)
                tasks.append(self.race(pools[-1 - j % POOLS], f"other-{j}", racers))
            self.rng.shuffle(tasks)
            await asyncio.gather(*tasks)


def test_concurrent_clients_agree_with_a_replay_of_the_log(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """Two hosts that share nothing but Redis (two ``committee serve``, 2 workers each),
    the clients spread over both."""
    name = "majority"
    with (
        Service(tmp_path, workers=2, redis_url=redis_url, prefix=redis_prefix) as a,
        Service(tmp_path, workers=2, redis_url=redis_url, prefix=redis_prefix) as b,
    ):
        with httpx.Client(base_url=a.url, timeout=60) as c:
            assert c.post("/v1/models", json=majority_model(name)).status_code == 201
            load = Load([a.url, b.url], name, seed=7)
            asyncio.run(load.run())
            state = c.get(f"/v1/models/{name}/state")
            assert state.status_code == 200, state.text
            model = wait_folded(c, name)
        with httpx.Client(base_url=b.url, timeout=60) as c:
            # the other host serves the same state
            assert c.get(f"/v1/models/{name}/state").json() == state.json()
        assert a.stop() == 0 and b.stop() == 0

    assert load.unexpected == []
    # a same-label race: every client gets the one answer
    same = [replies for t, replies in load.races if t.startswith("same-")]
    assert len(same) == SAME_LABEL_RACES
    for replies in same:
        assert {code for _, code, _ in replies} == {200}
        assert len({orjson.dumps(body) for _, _, body in replies}) == 1
    # a race of different labels: one label wins, for all who sent it; the others get 409
    for t, replies in load.races:
        if t.startswith("other-"):
            winners = {y for y, code, _ in replies if code == 200}
            assert len(winners) == 1, replies
            for y, code, body in replies:
                assert code == (200 if y in winners else 409), (t, y, code, body)
                if code == 409:
                    assert "already labelled" in body["detail"]

    by_version: dict[int, list[tuple[dict[str, Any], Any, dict[str, float]]]] = defaultdict(list)
    for x, p in load.predicted:
        by_version[p["model_version"]].append((x, p["label"], p["scores"]))
    rep = replay(redis_url, redis_prefix, name, by_version)
    assert state.json()["model_version"] == rep.model.version
    assert_same_state(orjson.loads(rep.model.export()), state.json()["state"])
    check_answers(rep, load.predicted, load.labelled, load.learned)
    # and nothing in the log that was not acknowledged
    assert set(rep.trial_seq) == {t for t, _, _ in load.labelled}
    assert sum(map(len, learn_entries(rep).values())) == len(load.learned)

    kinds = Counter(rep.kinds.values())
    assert model["version"] == len(rep.kinds) == state.json()["model_version"]
    assert model["counters"] == {
        "predictions": len({p["trial_id"] for _, p in load.predicted}),
        "labelled": kinds["label"],
        "learned": kinds["learn"],
        "mistakes": rep.mistakes,
        "updates": rep.updates,
        "expired": 0,
        "late_labels": 0,
        "quarantined": 0,
        "refused": 0,
    }
    assert kinds["label"] + kinds["learn"] == model["version"]
    assert kinds["label"] == len({t for t, _, _ in load.labelled})
