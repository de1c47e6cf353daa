"""A worker SIGKILLed while a challenger is promoted, trials flowing: every worker then
holds the learner an independent replay of the log gives, the unpromoted one or the
promoted one, never a mix, and the promote, retried with its Idempotency-Key, is in the
log exactly once."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
from _procs import START_TIMEOUT, Service, assert_same_state, client_connections, replay
from harness.redis_cluster import sync_client

from storage.codec import decode_entry
from storage.keys import Keys

NAME = "promoted"
LABELS = ["cat", "dog", "bird"]
MODEL = {
    "labels": LABELS,
    "input": {"experts": {"expert_names": ["cnn", "svm", "rf"]}},
    "learner": {"kind": "committee", "alpha": 1.3},
}
# the challengers promoted in turn, one a round
SPECS = [
    {"kind": "weighted-majority", "beta": 0.5},
    {"kind": "committee", "alpha": 1.5},
    {"kind": "weighted-majority", "beta": 0.3, "update": "on_mistake"},
]


def _items(rng: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(n):
        y = rng.choice(LABELS)
        cnn = y if rng.random() < 0.8 else rng.choice(LABELS)
        experts = {"cnn": cnn, "svm": rng.choice(LABELS), "rf": rng.choice(LABELS)}
        out.append({"instance": {"experts": experts}, "label": y})
    return out


def _load(url: str, stop: threading.Event, seed: int) -> None:
    """Learn small batches until ``stop``; a worker killed under one is the client's to
    retry, and what the log holds is what the test compares."""
    rng = random.Random(seed)
    while not stop.is_set():
        with httpx.Client(base_url=url, timeout=30, headers={"Connection": "close"}) as c:
            try:
                c.post(f"/v1/models/{NAME}/learn/batch", json={"items": _items(rng, 5)})
            except httpx.TransportError:
                time.sleep(0.05)


def _promotes(redis_url: str, prefix: str) -> list[str]:
    """The challengers the log's entries promote, in order."""
    keys = Keys(prefix, NAME)
    with sync_client(redis_url) as r:
        raw = r.xrange(keys.log, "-", "+")
    out = []
    for entry_id, fields in raw:
        flat = [v for kv in fields.items() for v in kv]
        e = decode_entry(entry_id, flat, 3, 3)
        if e.kind == "change":
            op = orjson.loads(e.change).get("challenger") or {}
            if op.get("op") == "promote":
                out.append(op["name"])
    return out


def _wait_workers(svc: Service, victim: int) -> None:
    """Until uvicorn has replaced the killed worker and the new one answers (it warms up
    first: as long as a start may take)."""
    deadline = time.monotonic() + START_TIMEOUT
    while victim in (pids := svc.worker_pids()) or len(pids) != svc.workers:
        assert time.monotonic() < deadline, f"workers: {pids}"
        time.sleep(0.1)
    ready = 0
    while ready < 8:  # fresh connections, either worker: all ready
        with httpx.Client(base_url=svc.url, timeout=30) as c:
            try:
                ready = ready + 1 if c.get("/readyz").status_code == 200 else 0
            except httpx.TransportError:
                ready = 0
        assert time.monotonic() < deadline, "the workers did not become ready"
        time.sleep(0.05)


def _holder(svc: Service, c: httpx.Client) -> int:
    """The worker that holds ``c``'s kept-alive connection: the one holding a connection
    in three looks in a row, alone (the load's connections come and go)."""
    for _ in range(100):
        assert c.get("/readyz").status_code == 200
        pids = svc.worker_pids()
        held = set(pids)
        for _ in range(3):
            held &= {pid for pid, n in client_connections(pids, svc.port).items() if n}
            time.sleep(0.01)
        if len(held) == 1:
            return held.pop()
    raise AssertionError("no single worker holds the connection")


def _send(url: str, path: str, key: str) -> httpx.Response | None:
    """POST ``path`` once with an Idempotency-Key on a connection of its own; None when
    the worker died under it."""
    with httpx.Client(base_url=url, timeout=30, headers={"Connection": "close"}) as c:
        try:
            return c.post(path, headers={"Idempotency-Key": key})
        except httpx.TransportError:
            return None


def _every_worker(url: str, redis_url: str, prefix: str) -> tuple[dict[str, Any], list[str]]:
    """What both workers answer (over fresh connections), checked equal to a replay of the
    log: the model's learner, its exact state and its challengers' figures. Returns the
    learner's spec and the challengers' names."""
    rep = replay(redis_url, prefix, NAME)
    want_spec = rep.model.config["learner"]
    want_state = rep.model.learner.export_state()
    want_names = list(rep.model.challengers)
    answers: dict[str, Any] = {}
    deadline = time.monotonic() + 60
    while len(answers) < 2:  # fresh connections until both workers answered
        assert time.monotonic() < deadline, f"answers from {sorted(answers)} only"
        with httpx.Client(base_url=url, timeout=30) as c:
            model = c.get(f"/v1/models/{NAME}")
            state = c.get(f"/v1/models/{NAME}/state").json()["state"]
            challengers = c.get(f"/v1/models/{NAME}/challengers").json()
        assert model.json()["learner"] == challengers["learner"] == want_spec
        assert [ch["name"] for ch in challengers["challengers"]] == want_names
        assert_same_state(state, orjson.loads(orjson.dumps(want_state)))
        answers[model.headers["x-committee-worker"]] = challengers
    first, second = answers.values()
    assert first == second
    return want_spec, want_names


def test_a_worker_killed_mid_promote_leaves_one_learner_or_the_other(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    rng = random.Random(51)
    with Service(tmp_path, workers=2, redis_url=redis_url, prefix=redis_prefix) as svc:
        with httpx.Client(base_url=svc.url, timeout=30) as c:
            assert c.post("/v1/models", json={"name": NAME, **MODEL}).status_code == 201
            r = c.post(f"/v1/models/{NAME}/learn/batch", json={"items": _items(rng, 40)})
            assert r.status_code == 200, r.text
        spec = MODEL["learner"]
        for round_, challenger_spec in enumerate(SPECS):
            challenger = f"c{round_}"
            with httpx.Client(base_url=svc.url, timeout=30) as c:
                body = {"name": challenger, "learner": challenger_spec}
                r = c.post(f"/v1/models/{NAME}/challengers", json=body)
                assert r.status_code == 201, r.text
            stop = threading.Event()
            load = threading.Thread(target=_load, args=(svc.url, stop, round_))
            load.start()
            try:
                time.sleep(0.2)  # trials flowing
                key = uuid.uuid4().hex
                path = f"/v1/models/{NAME}/challengers/{challenger}/promote"
                with httpx.Client(base_url=svc.url, timeout=30) as c:
                    # the promote goes to the worker that holds this connection: killed
                    # before it reads the request, while it writes, or after it answered
                    victim = _holder(svc, c)
                    delay = rng.uniform(0.0, 0.03)
                    killer = threading.Timer(delay, os.kill, (victim, signal.SIGKILL))
                    killer.start()
                    try:
                        first: httpx.Response | None = c.post(
                            path, headers={"Idempotency-Key": key}
                        )
                    except httpx.TransportError:
                        first = None
                    killer.join()
                time.sleep(0.2)
            finally:
                stop.set()
                load.join()
            _wait_workers(svc, victim)
            # before any retry: one learner or the other on every worker, as the log says
            got, names = _every_worker(svc.url, redis_url, redis_prefix)
            promoted = _promotes(redis_url, redis_prefix)
            if first is not None and first.status_code == 200:
                assert promoted[-1:] == [challenger]
            elif first is not None:  # refused as the worker went: a status that says so
                assert first.status_code in (409, 503), first.text
            assert got == (challenger_spec if promoted[-1:] == [challenger] else spec)
            assert (challenger in names) == (promoted[-1:] != [challenger])
            # retried with its key until answered: promoted once
            for _ in range(100):
                again = _send(svc.url, path, key)
                if again is not None and again.status_code != 503:
                    break
                time.sleep(0.1)
            assert again is not None and again.status_code == 200, again and again.text
            assert again.json()["learner"] == challenger_spec
            assert _promotes(redis_url, redis_prefix) == [f"c{i}" for i in range(round_ + 1)]
            got, names = _every_worker(svc.url, redis_url, redis_prefix)
            assert got == challenger_spec and challenger not in names
            spec = challenger_spec
        assert svc.stop() == 0
