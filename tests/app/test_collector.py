"""The garbage collector of a worker: collected less often, and what the worker made while
starting frozen, where the collector no longer walks it."""

from __future__ import annotations

import gc
import uuid
import weakref
from collections.abc import Iterator

import httpx
import pytest
from _server import ServerThread

from app.core import collector
from app.core.settings import Settings


@pytest.fixture
def gc_restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.set_threshold(*threshold)


def test_a_worker_sets_the_young_collections_apart(redis_url: str, gc_restored: None) -> None:
    gc.set_threshold(700, *gc.get_threshold()[1:])
    settings = Settings(redis_url=redis_url, key_prefix=f"t-{uuid.uuid4().hex[:12]}")
    assert settings.gc_threshold == 50_000  # the default
    settings = settings.model_copy(update={"gc_threshold": 12_345})
    with ServerThread(settings) as server:
        assert httpx.get(f"{server.url}/healthz").status_code == 200
        assert gc.get_threshold()[0] == 12_345
        assert collector._frozen >= {"started", "warm"}  # (the warm-up is done: see ServerThread)


def test_a_threshold_of_zero_keeps_pythons(gc_restored: None) -> None:
    gc.set_threshold(700, 11, 12)
    collector.collect_less(0)
    assert gc.get_threshold() == (700, 11, 12)
    collector.collect_less(9_000)
    assert gc.get_threshold() == (9_000, 11, 12)


class Node:
    """An object in a reference cycle of its own: garbage only the collector frees."""

    def __init__(self) -> None:
        self.itself = self


def test_a_freeze_collects_the_garbage_then_freezes_the_rest_once() -> None:
    when = f"test-{uuid.uuid4().hex}"
    kept = [[] for _ in range(1_000)]
    gc.disable()  # no collection but the freeze's own (other threads allocate too)
    try:
        garbage = weakref.ref(Node())
        assert garbage() is not None
        before = gc.get_freeze_count()
        collector.freeze(when)
        assert garbage() is None  # collected, then the rest frozen
        frozen = gc.get_freeze_count()
        assert frozen >= before + len(kept)
        more = [[] for _ in range(1_000)]
        collector.freeze(when)  # once for each point of the process's life
        assert gc.get_freeze_count() < frozen + len(more)
    finally:
        gc.enable()
        gc.unfreeze()
