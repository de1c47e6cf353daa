"""Calls of one kind on one model gathered into one: a group commit.

When a model is busy, its single-trial calls arrive while one of them is already in
flight to Redis. :class:`Gather` lets the first go at once and has those that arrive
meanwhile wait; when it returns, they go together as one batch call (one script call,
one round trip), and so on while calls keep coming. An idle model's call pays nothing
for it; a busy one's pay one round trip and one script run per batch instead of per call.
Each caller gets its own item's result, or the batch call's error.

A gather may have several lanes: while fewer calls than that are in flight and none
waits, a call goes at once on its own; only calls beyond them wait and go together. Reads
that must see what came before them take this form (a few at once cost little, and
waiting for a read in flight would double their latency).

A gather of calls that seldom wait on anything (a prediction kept nowhere, answered from
the worker's copy of the model) would never gather at all: each call is done before the
next is read. Such a gather goes by turns of the event loop instead (``by_turn``): every
call waits for the end of the turn in which it arrived, and those that arrived in the same
turn (the requests read from every connection that turn) go together.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["Gather", "Gathers"]

K = TypeVar("K")
T = TypeVar("T")
R = TypeVar("R")


class Gather(Generic[T, R]):
    """Run ``run`` on a list of items (at most ``most``), which returns one result per
    item, in order; callers hand in one item each, at most ``lanes`` calls or batches
    in flight, or every call by turns of the event loop (``by_turn``: see the module
    docstring)."""

    def __init__(
        self,
        run: Callable[[list[T]], Awaitable[Sequence[R]]],
        most: int,
        lanes: int = 1,
        by_turn: bool = False,
    ) -> None:
        self._run = run
        self._most = max(1, most)
        self._lanes = max(1, lanes)
        self._by_turn = by_turn
        self._running = 0  # calls and batches in flight
        self._waiting: list[tuple[T, asyncio.Future[R]]] = []
        self._drain: asyncio.Task[None] | None = None

    @property
    def idle(self) -> bool:
        return not self._running and not self._waiting and self._drain is None

    async def __call__(self, item: T) -> R:
        # those waiting go first: a call arriving after them waits too
        if self._running >= self._lanes or self._waiting or self._by_turn:
            fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
            self._waiting.append((item, fut))
            if self._by_turn and self._drain is None:
                # a task's first step runs after every callback already due this turn
                self._drain = asyncio.ensure_future(self._drain_waiting())
            return await fut
        self._running += 1
        try:
            return (await self._run([item]))[0]
        finally:
            self._running -= 1
            if self._waiting and self._drain is None:
                self._drain = asyncio.ensure_future(self._drain_waiting())

    async def _drain_waiting(self) -> None:
        batch: list[tuple[T, asyncio.Future[R]]] = []
        try:
            while self._waiting:
                # callers that gave up meanwhile (their request cut) are not sent
                batch = [(i, f) for i, f in self._waiting[: self._most] if not f.done()]
                del self._waiting[: self._most]
                if not batch:
                    continue
                self._running += 1
                try:
                    results = await self._run([i for i, _ in batch])
                except Exception as e:
                    for _, f in batch:
                        if not f.done():
                            f.set_exception(e)
                    continue
                finally:
                    self._running -= 1
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
            self._drain = None


class Gathers(Generic[K, T, R]):
    """One :class:`Gather` per key with calls in flight, each running ``run(key, items)``:
    the batch method is given once, when the gathers are made (as a data loader takes its
    batch function), and every gather of a key is made by its first call and dropped once
    idle."""

    def __init__(
        self,
        run: Callable[[K, list[T]], Awaitable[Sequence[R]]],
        most: int,
        lanes: int = 1,
        by_turn: bool = False,
    ) -> None:
        self._run = run
        self._most = most
        self._lanes = lanes
        self._by_turn = by_turn
        self._by: dict[K, Gather[T, R]] = {}

    async def __call__(self, key: K, item: T) -> R:
        g = self._by.get(key)
        if g is None:
            g = self._by[key] = Gather(
                functools.partial(self._run, key), self._most, self._lanes, self._by_turn
            )
        try:
            return await g(item)
        finally:
            if g.idle and self._by.get(key) is g:
                del self._by[key]
