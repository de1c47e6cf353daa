"""The garbage collector set for a server process.

A worker allocates a few hundred objects per request, nearly all freed at once by
reference counting; the cyclic collector exists for the rest. With Python's default
threshold (a young collection every 700 allocations, and a full one every hundred of
those) it ran thousands of times a second, and each full collection walked every object
the process holds: the modules, the compiled kernels and the models' bookkeeping, some
two hundred thousand. That cost a sixth to a fifth of a fusion trial's CPU, and each
full collection stalled the event loop for up to a tenth of a second.

So a worker collects its youngest generation every ``threshold`` allocations instead,
and once it has started, and again once its kernels are warm, it collects what is garbage
then and freezes the rest (:func:`gc.freeze`): those objects live as long as the process,
and the collector no longer walks them.
"""

from __future__ import annotations

import gc
import threading

__all__ = ["collect_less", "freeze"]

_lock = threading.Lock()
_frozen: set[str] = set()  # the points of this process's life already frozen


def collect_less(threshold: int) -> None:
    """Collect the youngest generation every ``threshold`` allocations (0: Python's own
    threshold), and freeze what the process made while starting."""
    if threshold:
        gc.set_threshold(threshold, *gc.get_threshold()[1:])
    freeze("started")


def freeze(when: str) -> None:
    """Collect the garbage, then freeze every object left (once per process for each
    ``when``: a process that builds many apps, as tests do, pays it once)."""
    with _lock:
        if when in _frozen:
            return
        _frozen.add(when)
    gc.collect()
    gc.freeze()
