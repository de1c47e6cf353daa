"""The kernel warm-up of a worker: off the event loop, awaited before learners are built.

On a fresh numba cache, compiling the learners' kernels takes tens of seconds. A worker
runs :func:`warm_worker` (the learners' kernels, :func:`models.warm.warm_kernels`, the
request-body reader's, :mod:`app.core.jsontext`, and the monitors': the scorecards',
:mod:`app.service.scorecards`, and the drift and bound watches',
:mod:`app.service.drift_watch` and :mod:`app.service.bound_watch`) in a background
thread as it starts, so neither ``/healthz`` nor any request waits on the compiler;
``/readyz`` answers 503 until it is done, bodies are read by the full JSON parser
meanwhile (numba's dispatchers are not safe to compile from two threads at once), and the
service awaits :meth:`Warmup.wait` before it first builds a learner.

Compiled kernels live as long as the process, so one warm-up serves every app the process
builds (tests build many): the first :class:`Warmup` to start runs it, later ones share it.
A warm-up that fails is logged and counts as done: kernels then compile on first use, as
they would without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
from concurrent.futures import Future

from app.core import jsontext
from app.core.collector import freeze
from app.service import bound_watch, drift_watch, scorecards
from models.warm import place_cache, warm_kernels

__all__ = ["Warmup", "place_worker_cache", "warm_here", "warm_worker"]

log = logging.getLogger("committee.warm")

_lock = threading.Lock()
_shared: Future[dict[str, float]] | None = None  # this process's warm-up, once started


def place_worker_cache() -> str:
    """Place the kernel cache (:func:`models.warm.place_cache`) for every kernel defined
    so far in ``models`` and ``app``; the directory. A process that imports the service
    before it places the cache (the command line, a benchmark) would otherwise compile
    the app's kernels into numba's default folder beside their sources, which a fresh
    clone does not have."""
    ours = [m for name, m in list(sys.modules.items()) if name.startswith("app.") and m]
    return place_cache(*ours)


def warm_worker() -> dict[str, float]:
    """Every kernel a worker runs, compiled into (or loaded from) the cache
    :func:`place_worker_cache` places; seconds per learner kind (the body reader's and
    the monitors' few are the first kind's)."""
    place_worker_cache()
    start = time.perf_counter()
    jsontext.warm()
    scorecards.warm()
    drift_watch.warm()
    bound_watch.warm()
    reader = time.perf_counter() - start
    seconds = warm_kernels()
    first = next(iter(seconds), None)
    if first is not None:
        seconds[first] += reader
    return seconds


def _run(done: Future[dict[str, float]]) -> None:
    start = time.perf_counter()
    try:
        seconds = warm_worker()
    except BaseException as e:  # the future must complete, whatever happened
        log.exception("kernel warm-up failed; kernels compile on first use")
        done.set_exception(e)
        return
    finally:
        jsontext.release()
    freeze("warm")  # the compiled kernels live as long as the process
    slowest = max(seconds, key=seconds.__getitem__)
    log.info(
        "kernels warm in %.1f s (slowest: %s, %.1f s)",
        time.perf_counter() - start,
        slowest,
        seconds[slowest],
    )
    done.set_result(seconds)


def _begin() -> tuple[Future[dict[str, float]], bool]:
    """This process's one warm-up, and whether the caller is the first, which must run it."""
    global _shared
    with _lock:
        if _shared is not None:
            return _shared, False
        _shared = Future()
        # running: a cancelled waiter can never cancel it for the others
        _shared.set_running_or_notify_cancel()
        jsontext.hold()  # no body calls a kernel the warm-up is compiling
        log.info("warming up: compiling the learners' kernels (or loading them from cache)")
        return _shared, True


def _process_warmup() -> Future[dict[str, float]]:
    """This process's one warm-up, started in a thread by the first caller."""
    done, first = _begin()
    if first:
        threading.Thread(target=_run, args=(done,), name="warmup", daemon=True).start()
    return done


def warm_here() -> None:
    """Run this process's warm-up in the calling thread and return once it is over, failed
    included (a server's parent process, before it forks its workers: they start warm, and
    no thread of its runs at the fork)."""
    done, first = _begin()
    if first:
        _run(done)
    with contextlib.suppress(Exception):  # a failure is logged; kernels compile lazily
        done.result()


class Warmup:
    """The kernel warm-up as one app sees it: :meth:`start` it, then read :attr:`ready`
    or await :meth:`wait` from the event loop."""

    def __init__(self) -> None:
        self._future: Future[dict[str, float]] | None = None

    def start(self) -> None:
        """Start the warm-up in a background thread (or join the process's running one)."""
        if self._future is None:
            self._future = _process_warmup()

    @property
    def ready(self) -> bool:
        """Whether the warm-up is over (failed included: see :attr:`error`)."""
        return self._future is not None and self._future.done()

    @property
    def error(self) -> BaseException | None:
        """What a failed warm-up raised; None while it runs or when it succeeded."""
        return self._future.exception() if self.ready and self._future else None

    @property
    def seconds(self) -> dict[str, float] | None:
        """Seconds per learner kind, once the warm-up succeeded."""
        if not self.ready or self.error is not None or self._future is None:
            return None
        return self._future.result()

    async def wait(self) -> None:
        """Return once the warm-up is over, without blocking the event loop."""
        if self._future is None:
            raise RuntimeError("Warmup.wait() before Warmup.start()")
        if not self._future.done():
            with contextlib.suppress(Exception):  # a failure is logged; kernels compile lazily
                await asyncio.wrap_future(self._future)
