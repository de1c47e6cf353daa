"""Background loops that stop when asked, between their calls to Redis.

A task cancelled while redis-py's client is in the middle of a command can be left
waiting forever (the client catches the cancellation while it reconnects), and a worker
stopping would wait on it until its shutdown timeout, or for good. The loops a worker runs
for its whole life therefore wait on a stop event between rounds instead of sleeping, and
are stopped by setting it, not cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["until"]


async def until(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds``, or less if ``stop`` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
