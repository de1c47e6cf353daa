"""Winnow-family on-line learners, their instances and state documents (no I/O).

Compiled loops are cached on disk by numba. numba keys a cached function on its own source
file only, so code compiled against another module of this package would survive a change
to that module; the cache therefore lives in a directory named after a hash of every
source file here, and any change starts a fresh one.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numba


def _cache_dir() -> str:
    here = Path(__file__).resolve().parent
    digest = hashlib.blake2b(digest_size=8)
    for path in sorted(here.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    for root in (base, tempfile.gettempdir()):
        target = os.path.join(root, "committee-numba", digest.hexdigest())
        try:
            os.makedirs(target, exist_ok=True)
        except OSError:
            continue
        if os.access(target, os.W_OK):
            return target
    return ""  # nowhere writable: compile without caching


if not os.environ.get("NUMBA_CACHE_DIR"):
    numba.config.CACHE_DIR = _cache_dir()  # type: ignore[attr-defined]
