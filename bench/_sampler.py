"""A CPU-time stack sampler for a server process, driven by signals from outside.

``python -m _sampled <uvicorn's arguments>`` (:mod:`_sampled`) installs it before uvicorn
starts. The process then samples its Python stack each time it has spent
:data:`INTERVAL` seconds of CPU (``ITIMER_PROF``) while sampling is on: :data:`START`
turns it on (dropping earlier samples), :data:`STOP` turns it off and writes the stacks,
one ``frame;frame;... count`` line each (the collapsed form flame graphs read), to
``$SAMPLER_OUT.<pid>``.

Sampling profilers that read a process from outside see nothing but the event loop's
frame under uvloop; this one runs in the process. Python runs a signal's handler at the
next call of a Python function or jump back in a loop, so CPU spent in compiled code
(numba kernels, orjson, socket writes) is charged to the next Python function called,
usually one the same caller calls next: read shares by subtree, not by leaf.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from types import FrameType

__all__ = ["INTERVAL", "START", "STOP", "frame_name", "install"]

INTERVAL = 0.001  # seconds of process CPU between samples (the kernel's tick may round up)
# real-time signals: the service takes SIGUSR1 (it dumps its stacks)
START = signal.SIGRTMIN + 3
STOP = signal.SIGRTMIN + 4

_HERE = os.getcwd() + "/"
_counts: Counter[str] = Counter()
_on = False


def frame_name(filename: str, function: str, line: int | None) -> str:
    """``function (path:line)``, the path within its installed package's directory
    (``uvicorn/server.py``) or the working directory (``app/service/live_model.py``)."""
    _, packaged, path = filename.rpartition("/site-packages/")
    if not packaged and path.startswith(_HERE):
        path = path[len(_HERE) :]
    return f"{function} ({path}:{line})"


def _sample(signum: int, frame: FrameType | None) -> None:
    if not _on:
        return
    names = []
    while frame is not None:
        names.append(frame_name(frame.f_code.co_filename, frame.f_code.co_name, frame.f_lineno))
        frame = frame.f_back
    _counts[";".join(reversed(names))] += 1


def _start(signum: int, frame: FrameType | None) -> None:
    global _on
    _counts.clear()
    _on = True
    signal.setitimer(signal.ITIMER_PROF, INTERVAL, INTERVAL)


def _stop(signum: int, frame: FrameType | None) -> None:
    global _on
    _on = False
    signal.setitimer(signal.ITIMER_PROF, 0, 0)
    with open(f"{os.environ['SAMPLER_OUT']}.{os.getpid()}", "w") as out:
        out.writelines(f"{stack} {n}\n" for stack, n in _counts.items())


def install() -> None:
    """Sample this process on :data:`START` until :data:`STOP` (see the module)."""
    if "SAMPLER_OUT" not in os.environ:
        raise RuntimeError("SAMPLER_OUT is not set: where the stacks are written")
    signal.signal(signal.SIGPROF, _sample)
    signal.signal(START, _start)
    signal.signal(STOP, _stop)
