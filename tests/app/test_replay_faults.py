"""A worker's copy of a model whose replay raised part-way is never used again.

Replaying a log entry changes the learner, then the monitors judge it, then the copy's
version moves. Should anything between raise (a fault no other worker meets), the copy
has learned the entry without counting it: used again, it would learn it a second time
and fold outcomes no replay of the log gives. Two services over one Redis stand for two
workers; one monitor of worker ``a``'s copy fails once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
import pytest
from _procs import assert_same_state, majority_model, majority_payloads, replay

from app.core.settings import Settings
from app.service.model_service import ModelService
from storage.client import close, connect
from storage.repository import ModelStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FailsOnce:
    """A monitor that raises the first time it judges a trial, then judges as ``inner``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _fail_once(self) -> None:
        if not self.failed:
            self.failed += 1
            raise RuntimeError("a monitor's fault")

    def judged(self, *args: Any) -> None:
        self._fail_once()
        self.inner.judged(*args)

    def judged_run(self, *args: Any) -> None:
        self._fail_once()
        self.inner.judged_run(*args)


@pytest.fixture
def data() -> Iterator[tuple[dict[str, Any], int]]:
    return iter(majority_payloads(200, np.random.default_rng(11)))


async def test_a_copy_whose_replay_raised_is_reloaded_not_used_again(
    redis_url: str, redis_prefix: str, data: Iterator[tuple[dict[str, Any], int]]
) -> None:
    settings = Settings(redis_url=redis_url, key_prefix=redis_prefix)
    clients = [connect(redis_url) for _ in range(2)]
    a, b = (ModelService(ModelStore(c, redis_prefix), settings) for c in clients)
    config = {**majority_model("m"), "label_ttl": 60.0}
    del config["name"]
    try:
        await b.create_model("m", config)
        await b.trials.learn("m", [next(data) for _ in range(10)])
        await a.trials.learn("m", [next(data)])  # a's copy, loaded and current
        ma = a.replicas._live["m"]
        faulty = FailsOnce(next(iter(ma.monitors.values())))
        ma.monitors[next(iter(ma.monitors))] = faulty
        await b.trials.learn("m", [next(data) for _ in range(6)])

        # a's background fold replays b's trials and meets the fault
        a.replicas.refresh_soon("m")
        for _ in range(200):
            if faulty.failed:
                break
            await asyncio.sleep(0.01)
        assert faulty.failed == 1
        await asyncio.sleep(0.3)  # the refresh has ended
        assert a.replicas._live.get("m") is not ma, "the copy that failed still serves"
        assert ma.fold_payload() == b"", "the copy that failed still folds"

        # a serves on, from a copy that the log gives, and the counters are the log's
        got = await a.trials.learn("m", [next(data) for _ in range(3)])
        assert all(isinstance(r, dict) for r in got), got
        version, state = await a.export_state("m")
        rep = replay(redis_url, redis_prefix, "m")
        assert version == rep.model.version == 20
        assert_same_state(orjson.loads(rep.model.export()), state)
        for _ in range(100):
            stored = await b.store.read("m")
            if stored.folded == stored.version:
                break
            await asyncio.sleep(0.05)
        assert (stored.folded, stored.counters["mistakes"], stored.counters["updates"]) == (
            20,
            rep.mistakes,
            rep.updates,
        )
    finally:
        for s, c in zip((a, b), clients, strict=True):
            await s.close()
            await close(c)
