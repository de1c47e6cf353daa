"""Calls of one kind on one model gathered into one: a group commit.

When a model is busy, its single-trial calls arrive while one of them is already in
flight to Redis. :class:`Gather` lets the first go at once and has those that arrive
meanwhile wait; when it returns, they go together as one batch call (one script call,
one round trip), and so on while calls keep coming. An idle model's call pays nothing
for it; a busy one's pay one round trip and one script run per batch instead of per call.
Each caller gets its own item's result, or the batch call's error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["Gather", "Gathers"]

K = TypeVar("K")
T = TypeVar("T")
R = TypeVar("R")


class Gather(Generic[T, R]):
    """Run ``run`` on a list of items (at most ``most``), which returns one result per
    item, in order; callers hand in one item each (see the module docstring)."""

    def __init__(self, run: Callable[[list[T]], Awaitable[Sequence[R]]], most: int) -> None:
        self._run = run
        self._most = max(1, most)
        self._waiting: list[tuple[T, asyncio.Future[R]]] = []
        self._busy = False
        self._drain: asyncio.Task[None] | None = None

    @property
    def idle(self) -> bool:
        return not self._busy and not self._waiting

    async def __call__(self, item: T) -> R:
        if self._busy:
            fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
            self._waiting.append((item, fut))
            return await fut
        self._busy = True
        try:
            return (await self._run([item]))[0]
        finally:
            if self._waiting:
                self._drain = asyncio.ensure_future(self._drain_waiting())
            else:
                self._busy = False

    async def _drain_waiting(self) -> None:
        batch: list[tuple[T, asyncio.Future[R]]] = []
        try:
            while self._waiting:
                # callers that gave up meanwhile (their request cut) are not sent
                batch = [(i, f) for i, f in self._waiting[: self._most] if not f.done()]
                del self._waiting[: self._most]
                if not batch:
                    continue
                try:
                    results = await self._run([i for i, _ in batch])
                except Exception as e:
                    for _, f in batch:
                        if not f.done():
                            f.set_exception(e)
                    continue
                for (_, f), r in zip(batch, results, strict=True):
                    if not f.done():
                        f.set_result(r)
                batch = []
        except BaseException:  # cancelled (the worker stops): no caller is left waiting
            for _, f in [*batch, *self._waiting]:
                f.cancel()
            self._waiting.clear()
            raise
        finally:
            self._busy = False
            self._drain = None


class Gathers(Generic[K, T, R]):
    """A :class:`Gather` for each key that has calls in flight: made by the first call of
    its key, with that call's ``run`` and ``most``, and dropped once idle."""

    def __init__(self) -> None:
        self._by: dict[K, Gather[T, R]] = {}

    async def __call__(
        self, key: K, run: Callable[[list[T]], Awaitable[Sequence[R]]], most: int, item: T
    ) -> R:
        g = self._by.get(key)
        if g is None:
            g = self._by[key] = Gather(run, most)
        try:
            return await g(item)
        finally:
            if g.idle and self._by.get(key) is g:
                del self._by[key]
