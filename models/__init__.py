"""Winnow-family on-line learners, their instances and state documents (no I/O).

The package is in layers, each importing only those below it (checked by import-linter,
see ``.importlinter``): ``kernels`` (the compiled loops), ``core`` (the learner contract,
hypotheses, parameters, instances, state documents, the kind table and nested learners),
``learners`` and ``inputs``, ``wrappers``, ``ensembles``, ``voting``, then ``registry``
(every kind), ``budget`` and ``warm``. The public names are re-exported here.

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
    for path in sorted(here.rglob("*.py")):
        digest.update(str(path.relative_to(here)).encode())
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

# The public names; imported after the cache is placed, since a compiled loop finds its
# cache when it is defined.
from models.core.forms import BinaryLearner, MulticlassLearner  # noqa: E402
from models.core.hypothesis import Hypothesis, Label  # noqa: E402
from models.core.instance import (  # noqa: E402
    AttributeBatch,
    Attributes,
    Experts,
    InvalidInstance,
)
from models.core.learner import Learner, Outcome, UnknownLabel, UpdateRefused  # noqa: E402
from models.core.params import InvalidParameter  # noqa: E402
from models.core.state import InvalidState  # noqa: E402
from models.inputs.space import InputSpace  # noqa: E402
from models.registry import (  # noqa: E402
    CONTEXT_PARAMS,
    KINDS,
    build,
    describe,
    from_state,
    kind_of,
)

__all__ = [
    "CONTEXT_PARAMS",
    "KINDS",
    "AttributeBatch",
    "Attributes",
    "BinaryLearner",
    "Experts",
    "Hypothesis",
    "InputSpace",
    "InvalidInstance",
    "InvalidParameter",
    "InvalidState",
    "Label",
    "Learner",
    "MulticlassLearner",
    "Outcome",
    "UnknownLabel",
    "UpdateRefused",
    "build",
    "describe",
    "from_state",
    "kind_of",
]
