"""Faults: a worker killed mid-load, Redis unreachable, Redis restarted.

No acknowledged trial may be lost or applied twice: after each fault the trial log still
replays to exactly the state and counters the service reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
from _procs import (
    Service,
    assert_same_state,
    check_answers,
    client_connections,
    learn_entries,
    learn_some,
    majority_model,
    majority_payloads,
    replay,
    unread_requests,
    wait_folded,
    wait_ready,
)
from _workers import from_each_worker

from storage.codec import encode_instance
from storage.server import EmbeddedRedis

CLIENTS = 100
POOLS = 8
KILL_AFTER = 150  # acknowledged requests before a worker is killed
MORE_AFTER = 150  # and after
REPLACEMENT_CLIENTS = 20  # clients of the replacement worker alone
ON_REPLACEMENT = 60  # requests it answers
LABEL_TRIES = 5
CLOSE = {"Connection": "close"}  # a new connection per request: any worker may answer
# seconds for the load to reach the kill, and for a request to reach the stopped victim
KILL_TIMEOUT = 60.0


class FaultyLoad:
    """Clients that go on through failures: a transport error (the worker died under the
    request) is allowed; a label is then sent again, which must be safe (exactly once)."""

    def __init__(self, base_url: str, name: str, seed: int) -> None:
        self.base_url = base_url
        self.name = name
        self.rng = random.Random(seed)
        self.data = iter(majority_payloads(50_000, np.random.default_rng(seed)))
        self.acks = 0
        self.transport_errors = 0
        self.stop = asyncio.Event()
        self.predicted: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.labelled: list[tuple[str, int, dict[str, Any]]] = []
        self.unlabelled: list[str] = []  # trial ids whose label never got an answer
        self.learned: list[tuple[dict[str, Any], int, dict[str, Any]]] = []
        self.sent_learn: list[dict[str, Any]] = []
        self.sent_predict = 0
        self.unexpected: list[str] = []
        self.pools: list[httpx.AsyncClient] = []

    async def post(self, c: httpx.AsyncClient, tail: str, body: Any) -> dict[str, Any] | None:
        try:
            r = await c.post(f"/v1/models/{self.name}/{tail}", json=body)
        except httpx.TransportError:
            self.transport_errors += 1
            return None
        if r.status_code != 200:
            self.unexpected.append(f"{tail}: {r.status_code} {r.text}")
            return None
        self.acks += 1
        got: dict[str, Any] = r.json()
        return got

    async def predict_label(self, c: httpx.AsyncClient) -> None:
        x, y = next(self.data)
        self.sent_predict += 1
        p = await self.post(c, "predict", {"instance": x})
        if p is None:
            return
        self.predicted.append((x, p))
        for _ in range(LABEL_TRIES):
            got = await self.post(c, "label", {"trial_id": p["trial_id"], "label": y})
            if got is not None:
                self.labelled.append((p["trial_id"], y, got))
                return
        self.unlabelled.append(p["trial_id"])

    async def learn(self, c: httpx.AsyncClient, n: int) -> None:
        items = [next(self.data) for _ in range(n)]
        self.sent_learn += [x for x, _ in items]
        if n == 1:
            x, y = items[0]
            got = await self.post(c, "learn", {"instance": x, "label": y})
            if got is not None:
                self.learned.append((x, y, got))
            return
        body = {"items": [{"instance": x, "label": y} for x, y in items]}
        got = await self.post(c, "learn/batch", body)
        if got is not None:
            for (x, y), item in zip(items, got["items"], strict=True):
                if item["result"] is None:
                    self.unexpected.append(f"learn/batch item: {item}")
                else:
                    self.learned.append((x, y, item["result"]))

    async def client(self, i: int) -> None:
        while not self.stop.is_set():
            c = self.pools[i % len(self.pools)]
            op = self.rng.randrange(3)
            if op == 0:
                await self.predict_label(c)
            else:
                await self.learn(c, 1 if op == 1 else 4)

    async def until(self, acks: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.acks < acks:
            assert time.monotonic() < deadline, f"{self.acks} of {acks} requests answered"
            assert not self.unexpected, self.unexpected[:5]
            await asyncio.sleep(0.01)

    def connect(self, stack: contextlib.AsyncExitStack) -> None:
        """New connections for the clients (small pools: httpx is slow with large ones)."""
        self.pools = [httpx.AsyncClient(base_url=self.base_url, timeout=60) for _ in range(POOLS)]
        for pool in self.pools:
            stack.push_async_callback(pool.aclose)

    async def load(self, clients: int, more: int, after: asyncio.Event | None = None) -> None:
        """``clients`` clients on new connections until ``more`` requests are answered
        (after ``after`` is set, when given)."""
        self.stop.clear()
        async with contextlib.AsyncExitStack() as stack:
            self.connect(stack)
            tasks = [asyncio.ensure_future(self.client(i)) for i in range(clients)]
            try:
                if after is not None:
                    await asyncio.wait_for(after.wait(), KILL_TIMEOUT)
                await self.until(self.acks + more)
            finally:
                self.stop.set()
                await asyncio.gather(*tasks)

    async def run(self, svc: Service) -> dict[str, Any]:
        """Load; kill the worker holding the most client connections while the load goes
        on; once uvicorn has replaced it, freeze the other workers so that new connections
        reach only the replacement, and load it. Returns the state it first served."""
        killed: list[int] = []  # the victim, then the other workers
        done = asyncio.Event()  # the victim is dead: the load goes on from there

        async def kill() -> None:
            await self.until(KILL_AFTER)
            before = client_connections(svc.worker_pids(), svc.port)
            victim = max(before, key=lambda pid: before[pid])
            assert before[victim] > 0, before
            # frozen first, until a request sent on one of its connections waits there
            # unread: it is lost with the victim, and its client sees the connection fail
            # and must retry
            os.kill(victim, signal.SIGSTOP)
            deadline = time.monotonic() + KILL_TIMEOUT
            while not unread_requests(victim, svc.port):
                assert time.monotonic() < deadline, "no request reached the stopped worker"
                await asyncio.sleep(0.02)
            os.kill(victim, signal.SIGKILL)
            killed.extend([victim, *(pid for pid in before if pid != victim)])
            done.set()

        await asyncio.gather(self.load(CLIENTS, MORE_AFTER, after=done), kill())
        victim, *survivors = killed
        await self.replacement(svc, victim, survivors)
        for pid in survivors:
            os.kill(pid, signal.SIGSTOP)
        try:  # only the replacement accepts connections now
            async with httpx.AsyncClient(base_url=self.base_url, timeout=60) as probe:
                got = await probe.get(f"/v1/models/{self.name}/state")
            assert got.status_code == 200, got.text
            await self.load(REPLACEMENT_CLIENTS, ON_REPLACEMENT)
        finally:
            for pid in survivors:
                # uvicorn's supervisor replaces a worker that leaves its health check
                # unanswered for 5 s: on a slow machine, a frozen survivor may be gone
                # (it held no request: the load before had ended), and its successor
                # still starting when every worker is asked below
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        state: dict[str, Any] = got.json()
        return state

    async def replacement(self, svc: Service, victim: int, survivors: list[int]) -> int:
        """The worker uvicorn's supervisor starts for the victim, once it has started
        serving (it logs that at level info)."""
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, f"no replacement for worker {victim}"
            new = set(svc.worker_pids()) - {victim, *survivors}
            if new and f"Started server process [{min(new)}]" in svc.output(0):
                return min(new)
            await asyncio.sleep(0.05)


def test_a_worker_killed_mid_load_loses_no_acknowledged_trial(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    name = "majority"
    # frequent snapshots: the replacement worker loads a snapshot, then the log after it
    env = {"COMMITTEE_SNAPSHOT_EVERY": "100"}
    with Service(
        tmp_path, workers=3, redis_url=redis_url, prefix=redis_prefix, env=env, log_level="info"
    ) as svc:
        with httpx.Client(base_url=svc.url, timeout=60) as c:
            assert c.post("/v1/models", json=majority_model(name)).status_code == 201
            load = FaultyLoad(svc.url, name, seed=11)
            from_replacement = asyncio.run(load.run(svc))
            # every worker, the replacement included, serves the same state
            answers = from_each_worker(
                svc.workers, lambda: c.get(f"/v1/models/{name}/state", headers=CLOSE)
            )
            states = list(answers.values())
            assert {s.status_code for s in states} == {200}
            assert len({s.text for s in states}) == 1
            state = states[0].json()
            model = wait_folded(c, name)
        assert svc.stop() == 0

    assert load.unexpected == []
    # answers were lost with the victim: the retry path below ran
    assert load.transport_errors > 0
    # a label sent again after its answer was lost is answered (and applied once)
    assert load.unlabelled == []

    mid = from_replacement["model_version"]
    rep = replay(redis_url, redis_prefix, name, states_at=frozenset({mid}))
    assert state["model_version"] == rep.model.version == model["version"]
    assert_same_state(orjson.loads(rep.model.export()), state["state"])
    assert_same_state(rep.states[mid], from_replacement["state"], f"state at {mid}")
    check_answers(rep, load.predicted, load.labelled, load.learned)
    # nothing in the log that was not sent, nothing sent twice
    served = {p["trial_id"] for _, p in load.predicted}
    assert set(rep.trial_seq) == {t for t, _, _ in load.labelled} <= served
    sent = Counter(encode_instance(rep.model.encode(x)) for x in load.sent_learn)
    logged = learn_entries(rep)
    assert {x: len(s) for x, s in logged.items() if len(s) > sent[x]} == {}

    kinds = Counter(rep.kinds.values())
    counters = model["counters"]
    assert len(served) <= counters["predictions"] <= load.sent_predict
    assert counters == {
        "predictions": counters["predictions"],
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


# -- Redis stopped and started again --------------------------------------------------


@pytest.fixture
def own_redis() -> Iterator[EmbeddedRedis]:
    """A Redis of this test's own on a unix socket (a short path), so that it comes back
    at the same URL after a restart."""
    with tempfile.TemporaryDirectory(prefix="cf-", dir="/tmp") as d:
        server = EmbeddedRedis(d).start()
        try:
            assert server.url.startswith("unix://"), server.url
            yield server
        finally:
            server.stop()


def test_redis_unreachable_is_503_with_retry_after_and_nothing_is_lost(
    own_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    name = "majority"
    url = own_redis.url
    data = iter(majority_payloads(200, np.random.default_rng(3)))
    with (
        Service(tmp_path, workers=1, redis_url=url, prefix="faults") as svc,
        httpx.Client(base_url=svc.url, timeout=60) as c,
    ):
        assert c.post("/v1/models", json=majority_model(name)).status_code == 201
        learn_some(c, name, data, 20)
        pending = []
        for _ in range(3):
            x, y = next(data)
            p = c.post(f"/v1/models/{name}/predict", json={"instance": x})
            assert p.status_code == 200, p.text
            pending.append((p.json(), y))
        before = c.get(f"/v1/models/{name}/state").json()
        assert before["model_version"] == 20

        own_redis.stop()
        x, y = next(data)
        requests = [
            ("GET", "/readyz", None),
            ("GET", "/v1/models", None),
            ("GET", f"/v1/models/{name}", None),
            ("GET", f"/v1/models/{name}/state", None),
            ("POST", "/v1/models", majority_model("another")),
            ("POST", f"/v1/models/{name}/predict", {"instance": x}),
            (
                "POST",
                f"/v1/models/{name}/label",
                {"trial_id": pending[0][0]["trial_id"], "label": y},
            ),
            ("POST", f"/v1/models/{name}/learn", {"instance": x, "label": y}),
            ("POST", f"/v1/models/{name}/learn/batch", {"items": [{"instance": x, "label": y}]}),
        ]
        for method, path, body in requests:
            r = c.request(method, path, json=body)
            assert r.status_code == 503, (method, path, r.status_code, r.text)
            assert int(r.headers["Retry-After"]) >= 0, (path, r.headers)
            assert r.headers["content-type"] == "application/json"
            assert "Redis" in r.json()["detail"], (path, r.text)
        assert c.get("/healthz").status_code == 200  # alive, only not ready

        own_redis.start()
        assert own_redis.url == url
        wait_ready(c)
        model = c.get(f"/v1/models/{name}").json()
        assert (model["version"], model["counters"]["learned"]) == (20, 20)
        assert model["counters"]["predictions"] == 3
        after = c.get(f"/v1/models/{name}/state").json()
        assert after == before
        # the predictions made before the outage still take their labels, once
        for p, y in pending:
            r = c.post(f"/v1/models/{name}/label", json={"trial_id": p["trial_id"], "label": y})
            assert r.status_code == 200, r.text
            assert r.json()["predicted"] == p["label"]
        learn_some(c, name, data, 6)
        state = c.get(f"/v1/models/{name}/state").json()
        assert state["model_version"] == 29

    rep = replay(url, "faults", name)
    assert rep.model.version == 29
    assert_same_state(orjson.loads(rep.model.export()), state["state"])
    assert sorted(rep.trial_seq) == sorted(p["trial_id"] for p, _ in pending)


def test_a_redis_restart_loses_no_acknowledged_update(
    own_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    name = "majority"
    data = iter(majority_payloads(500, np.random.default_rng(5)))
    with (
        Service(tmp_path, workers=2, redis_url=own_redis.url, prefix="restart") as svc,
        httpx.Client(base_url=svc.url, timeout=60) as c,
    ):
        assert c.post("/v1/models", json=majority_model(name)).status_code == 201
        learn_some(c, name, data, 60)
        before = c.get(f"/v1/models/{name}/state").json()
        model_before = wait_folded(c, name)
        assert before["model_version"] == model_before["version"] == 60

        own_redis.stop()
        own_redis.start()
        wait_ready(c)

        model = c.get(f"/v1/models/{name}").json()
        assert model == model_before
        # each worker answers, from its memory or reloaded from Redis: the same state
        answers = from_each_worker(
            svc.workers, lambda: c.get(f"/v1/models/{name}/state", headers=CLOSE)
        )
        for s in answers.values():
            assert s.status_code == 200 and s.json() == before
        learn_some(c, name, data, 10)
        state = c.get(f"/v1/models/{name}/state").json()
        assert state["model_version"] == 70

    rep = replay(own_redis.url, "restart", name)
    assert_same_state(orjson.loads(rep.model.export()), state["state"])


def test_sigterm_stops_the_service_while_its_redis_is_frozen(
    own_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    """A Redis that stops answering holds no worker past its shutdown: requests in
    flight are answered or cut, and every worker exits. SIGUSR1 shows each stack."""
    name = "majority"
    data = iter(majority_payloads(40, np.random.default_rng(9)))
    svc = Service(
        tmp_path, workers=2, redis_url=own_redis.url, env={"COMMITTEE_SHUTDOWN_TIMEOUT": "1"}
    )
    redis_pid = own_redis.pid
    assert redis_pid is not None
    with svc, httpx.Client(base_url=svc.url, timeout=60) as c:
        assert c.post("/v1/models", json=majority_model(name)).status_code == 201
        learn_some(c, name, data, 20)
        os.kill(svc.worker_pids()[0], signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while "most recent call first" not in svc.output(0) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "most recent call first" in svc.output(0)

        os.kill(redis_pid, signal.SIGSTOP)
        try:
            # requests now wait on the frozen Redis while the service is told to stop
            outcomes: list[object] = []
            waiting = [
                threading.Thread(
                    target=post_recording,
                    args=(svc.url, f"/v1/models/{name}/learn", {"instance": x, "label": y}),
                    kwargs={"into": outcomes},
                )
                for x, y in (next(data) for _ in range(4))
            ]
            for t in waiting:
                t.start()
            time.sleep(0.5)
            assert svc.stop() == 0
            for t in waiting:
                t.join(30)
                assert not t.is_alive()
            # each was refused as unavailable or lost with its connection, none applied
            assert len(outcomes) == 4
            assert all(o == 503 or isinstance(o, httpx.TransportError) for o in outcomes), outcomes
        finally:
            os.kill(redis_pid, signal.SIGCONT)


def post_recording(url: str, path: str, body: dict[str, Any], *, into: list[object]) -> None:
    """POST once; append the status code, or the transport error."""
    try:
        with httpx.Client(base_url=url, timeout=60) as c:
            into.append(c.post(path, json=body).status_code)
    except httpx.TransportError as e:
        into.append(e)
