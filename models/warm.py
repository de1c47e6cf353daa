"""Warm-up: compile every kernel the learners use before the first real trial.

numba compiles a kernel the first time it is called with new argument types, or loads it
from its on-disk cache (see :func:`place_cache`); for all kinds that takes tens of seconds
on a fresh install. :func:`warm_kernels` runs a tiny but real workload of every kind in
:data:`models.registry.KINDS` through the paths the service takes, so that every
specialization production needs exists before the first request:

* payloads encoded by an :class:`~models.inputs.space.InputSpace` one at a time and as a batch,
  in every attribute form (dense, sparse with a constant, named, hashing) and in the
  experts form (named experts, split classes, attributes, threshold sub-experts), some
  rebuilt from int32 arrays as a worker decodes them from the trial log;
* ``coerce``, ``scores``, ``predict``, ``trial``, a frozen snapshot, the weights a
  dashboard reads, the batch replay ``learn_prefix`` where a learner has one, and a state
  export, JSON round trip and import, after which the imported learner learns again;
* a binary and a multi-class label set wherever the kind takes both, integer and float
  values of the numeric parameters, every base kind under each wrapper whose compiled
  path depends on it, and the ``vr-combine`` preset with its compiled V-Combine trial;
* the drift detectors of :mod:`models.drift` (:func:`warm_drift`), one value at a time and
  a stream, with a state round trip; their seconds count in the first kind's.

The workload is fixed (seeded). In a process where the kernels exist already it takes
about a second; on a fresh numba cache it compiles everything.

numba keys a cached kernel on its own source file only, so a kernel compiled against
another module (one it calls or inlines) would survive a change to that module.
:func:`place_cache`, which :func:`warm_kernels` calls first, therefore puts the cache in a
directory named after a hash of every source file of ``models``: any change starts a fresh
one. Within it a kernel's sub-folder is named after its source's folder within the
project (:class:`CheckoutCacheLocator`), so that another checkout of the same sources
uses what one compiled. ``NUMBA_CACHE_DIR``, which numba reads when it is imported,
overrides it (a test or benchmark gives a service an empty cache of its own so).
Importing ``models`` places nothing and reads no file; a process that runs kernels without
warming them first uses numba's own default cache (beside the sources, or in the user's
cache directory).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numba
import numpy as np
from numba.core.caching import CacheImpl, FunctionCache, UserProvidedCacheLocator
from numba.core.dispatcher import Dispatcher
from numba.typed import typedlist

from models.core.instance import Attributes, Experts
from models.drift import DETECTORS
from models.inputs.batch import RawExperts, RawFeatures
from models.inputs.space import InputSpace
from models.kernels.instances import attribute_blocks, expert_blocks, full_rows
from models.kernels.logentries import read_entries
from models.registry import KINDS, build, from_state, kind_of

__all__ = ["BINARY", "MULTI", "cases", "place_cache", "run_case", "warm_drift", "warm_kernels"]

Spec = dict[str, Any]

BINARY = ("yes", "no")
MULTI = ("a", "b", "c")
TRIALS = 8  # per case; voting kinds get more, so their slots and windows fill
VOTING_TRIALS = 24
#: S4's preset: its state round trip (62 learners rebuilt three times, about a second) is
#: left to the small preset beside it, which takes the same compiled paths.
PRESET: Spec = {"kind": "vr-combine"}

_NAMES = [f"f{i}" for i in range(6)]
_ATTRIBUTES: tuple[Spec, ...] = (
    {"n_features": 6},
    {"n_features": 6, "constant_attribute": True},
    {"feature_names": _NAMES},
    {"hashing": {"n_features": 8, "seed": 3}},
)
_EXPERTS: tuple[Spec, ...] = (
    {"experts": {"expert_names": ["e0", "e1", "e2"]}},  # raw scores: read in one call
    {"experts": {"expert_names": ["e0", "e1", "e2"], "normalize": "sum-to-one"}},
    {
        "experts": {
            "expert_names": ["e0", "e1"],
            "threshold_experts": True,
            "split_classes": "all",
        },
        "attributes": {"n_features": 4, "constant_attribute": True},
    },
    {  # several normalisations and subsets' averages (one compiled pass)
        "experts": {
            "expert_names": ["e0", "e1", "e2"],
            "normalize": ["rank", "raw"],
            "combinations": {"size": 3, "by": ["score", "rank"]},
        },
        "attributes": {"feature_names": _NAMES[:4]},
    },
    {"attributes": {"n_features": 6}},  # attributes alone: k sub-experts each
)

#: Base learners with integer and float parameters (learners pass floats to kernels).
_BINARY_BASES: tuple[Spec, ...] = (
    {"kind": "winnow"},
    {"kind": "winnow", "alpha": 2, "theta": 3, "theta_minus": 2, "theta_plus": 4},
    {"kind": "balanced-winnow"},
    {"kind": "balanced-winnow", "alpha": 2, "theta": 1, "strict": True},
    {"kind": "perceptron"},
    {"kind": "perceptron", "eta": 2},
    {"kind": "alma"},
    {"kind": "alma", "p": 3, "C": 1},
)
_SUBEXPERTS = tuple(
    {"kind": "subexpert", "learner": inner, "subexpert_z": z}
    for inner in ({"kind": "balanced-winnow"}, {"kind": "perceptron"}, {"kind": "alma", "p": 3})
    for z in ("predicted", "runner_up")
)
_EXPERT_BASES: tuple[Spec, ...] = (
    {"kind": "committee"},
    {"kind": "committee", "alpha": 2},
    {"kind": "multiclass-winnow"},
    {"kind": "multiclass-winnow", "alpha": 2},
    {"kind": "weighted-majority"},
    {"kind": "weighted-majority", "beta": 0, "update": "on_mistake"},
    *_SUBEXPERTS,
)
#: One of each base kind (and each sub-expert family), for the wrappers.
_ONE_EACH = (*_BINARY_BASES[::2], *_EXPERT_BASES[::2], _SUBEXPERTS[1], _SUBEXPERTS[5])
_LINEAR = tuple(s for s in _ONE_EACH if s["kind"] != "weighted-majority")


def _spaces(form: str, multi: bool) -> list[InputSpace]:
    """Input spaces of learners of ``form``, alternating binary and multi-class labels."""
    labelsets = (BINARY, MULTI) if multi else (BINARY,)
    if form == "attributes":
        return [InputSpace(ls, attributes=a) for a in _ATTRIBUTES for ls in labelsets]
    return [InputSpace(ls, **config) for config in _EXPERTS for ls in labelsets]


def _over(specs: Iterable[Spec], each: int = 1) -> Iterator[tuple[Spec, InputSpace]]:
    """Each spec over ``each`` of the spaces of its form, taking them in turn."""
    turn = 0
    for spec in specs:
        form = kind_of(spec).input_kind_for(spec)
        spaces = _spaces(form, form == "experts" or spec["kind"] == "ecoc")
        for _ in range(min(each, len(spaces))):
            yield spec, spaces[turn % len(spaces)]
            turn += 1


def _voting() -> list[Spec]:
    recycled = {"kind": "recycling", "size": 4, "learner": _SUBEXPERTS[0]}
    compiled = [recycled, {"kind": "averaging", "learner": recycled}]  # the compiled trial
    perceptron = {"kind": "perceptron"}
    attributes = [perceptron, {"kind": "averaging", "learner": perceptron}, _BINARY_BASES[3]]
    wm = {"select": "weighted-majority", "wm_update": "on_mistake", "vote_normalize": "l1"}
    return [
        {"kind": "v-combine", "learners": compiled, "h": 4, "r": 8},
        {"kind": "v-combine", "learners": [*_EXPERT_BASES[:3], *compiled], "h": 4},
        {"kind": "v-combine", "learners": list(_EXPERT_BASES[3:5]), "h": 2, **wm},
        {"kind": "v-combine", "learners": attributes, "h": 4, "vote_normalize": "maxabs"},
    ]


def cases(kind: str) -> Iterator[tuple[Spec, InputSpace]]:
    """The (spec, input space) pairs the warm-up runs for ``kind``."""
    if kind in ("winnow", "balanced-winnow", "perceptron", "alma"):
        yield from _over((s for s in _BINARY_BASES if s["kind"] == kind), each=4)
    elif kind == "ecoc":
        yield from _over({"kind": kind, "learner": b} for b in _BINARY_BASES)
    elif kind == "recycling":
        yield from _over({"kind": kind, "size": 4, "learner": b} for b in _ONE_EACH)
    elif kind == "averaging":  # also AR-B, averaging over recycling, as in VR-Combine
        inner = _LINEAR + tuple({"kind": "recycling", "size": 4, "learner": b} for b in _LINEAR)
        yield from _over({"kind": kind, "learner": b} for b in inner)
    elif kind in ("bagging", "boosting"):  # only the public contract of their copies
        bases = (_BINARY_BASES[4], _SUBEXPERTS[0])
        yield from _over(({"kind": kind, "learner": b, "n_models": 2} for b in bases), each=2)
    elif kind == "v-combine":
        yield from _over(_voting())
    elif kind == "vr-combine":  # the preset, and a small one with the other labels
        yield from _over([PRESET, {"kind": kind, "alphas": [1.1], "ps": [3], "h": 4}])
    elif kind == "fusion":  # Weighted Majority's kernels, with its weight floor
        yield from _over([{"kind": kind}])
    else:
        yield from _over((s for s in _EXPERT_BASES if s["kind"] == kind), each=4)


def _payloads(space: InputSpace, n: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    """``n`` payloads in the shapes the space reads, values in [0, 1]."""
    out: list[dict[str, Any]] = []
    attrs, experts, labels = space.attributes, space.experts, list(space.labels)
    for t in range(n):
        p: dict[str, Any] = {}
        if attrs is not None:
            names = attrs.get("feature_names")
            d = attrs.get("n_features") or (len(names) if names else 8)
            on = sorted(rng.choice(d, size=3, replace=False).tolist())
            # hashed names may collide and add up: their sums stay within [0, 1] too
            vals = [0.5, 0.25, 0.25] if "hashing" in attrs else [1.0, 0.5, 1]
            if names:
                p["features"] = {names[i]: v for i, v in zip(on, vals, strict=True)}
            elif "hashing" in attrs:
                p["features"] = {f"w{i}": v for i, v in zip(on, vals, strict=True)}
            elif t % 2:  # a dense list, else sparse {index: value}
                p["features"] = [float(i in on) for i in range(d)]
            else:
                p["features"] = {str(i): v for i, v in zip(on, vals, strict=True)}
        if experts is not None:
            e = experts["expert_names"]
            p["experts"] = {e[0]: labels[t % len(labels)], e[1]: rng.random(len(labels)).tolist()}
            if len(e) > 2 and t % 3:
                p["experts"][e[2]] = {labels[(t + 1) % len(labels)]: 1.0}
        out.append(p)
    return out


def _as_logged(x: Attributes | Experts) -> Attributes | Experts:
    """``x`` rebuilt from int32 indices, as a worker decodes it from the trial log: from
    the bytes of the entries of a replay, several together, and alone."""
    if isinstance(x, Attributes):
        blocks = [x.indices.astype(np.int32), x.values]
    else:
        blocks = [x.expert.astype(np.int32), x.cls.astype(np.int32), x.value]
    # together: the blocks after a one-byte tag, in bytes as the log's reply holds them
    buf = np.frombuffer(b"T" + b"".join(a.tobytes() for a in blocks), np.uint8)
    at, counts = np.ones(1, dtype=np.int64), np.full(1, len(blocks[0]), dtype=np.int64)
    # alone: read-only, as arrays over the stored bytes are (numba compiles for each kind)
    arrays = [np.frombuffer(a.tobytes(), a.dtype) for a in blocks]
    # a backtest's replay: the entry read with its id and fields (read-only bytes)
    items = [
        b"1-0",
        b"k",
        b"n",
        b"x",
        (b"A" if isinstance(x, Attributes) else b"E") + buf[1:].tobytes(),
        b"y",
        b"0",
    ]
    ends = np.cumsum(np.fromiter(map(len, items), np.int64, len(items)))
    read_entries(np.frombuffer(b"".join(items), np.uint8), ends, np.full(1, 6, dtype=np.int64))
    if isinstance(x, Attributes):
        Attributes.many_from_blocks(buf, at, counts)
        idx, val = arrays
        got = Attributes.ascending(idx, val)
        return Attributes(idx, val) if got is None else got
    Experts.many_from_blocks(buf, at, counts, max(x.n_classes, 1))
    e, c, v = arrays
    kept = Experts.ascending(e, c, v, max(x.n_classes, 1))
    return Experts(e, c, v) if kept is None else kept


def run_case(spec: Spec, space: InputSpace, trials: int = TRIALS, round_trip: bool = True) -> None:
    """One tiny workload of ``spec`` over ``space``, as the service would run it;
    ``round_trip``: also export and import the state, and learn on."""
    form = kind_of(spec).input_kind_for(spec)
    learner = build(spec, labels=space.labels, size=space.size(form))
    rng = np.random.default_rng(0)
    payloads = _payloads(space, trials, rng)
    ys = [space.labels[int(c)] for c in rng.integers(0, space.n_classes, trials)]
    xs = [learner.coerce(x) for x in space.encode_each(payloads, form)]
    xs[0] = learner.coerce(space.encode(payloads[0], form))
    if "experts" in payloads[0]:  # the votes also read from their JSON text
        text = json.dumps(payloads[0]["experts"]).encode()
        raw = RawExperts(text, 0, len(text))
        space.encode_each([raw], form)  # alone, and as one of many
        space.encode_each([raw, raw], form)
    elif isinstance(payloads[0].get("features"), dict):  # so are the features
        text = json.dumps(payloads[0]["features"]).encode()
        raw_features = RawFeatures(text, 0, len(text))
        space.encode_each([raw_features], form)
        space.encode_each([raw_features, raw_features], form)
    xs[-1] = learner.coerce(_as_logged(xs[-1]))
    for x in xs[:1] + xs[-1:]:
        if isinstance(x, Experts):  # as a trial's instance is stored, or a batch's rows
            full_rows(x.expert, x.cls)
            eb, cb = x.expert.astype("<i4").view(np.uint8), x.cls.astype("<i4").view(np.uint8)
            vb = x.value.astype("<f8").view(np.uint8)
            ptr = np.array([0, x.expert.size], dtype=np.int64)
            expert_blocks(eb, cb, vb, x.expert, x.cls, ptr, True)
        else:  # as a batch's rows are stored
            ib, vb = x.indices.astype("<i4").view(np.uint8), x.values.astype("<f8").view(np.uint8)
            attribute_blocks(ord("A"), ib, vb, np.array([0, x.indices.size], dtype=np.int64))
    for x, y in zip(xs, ys, strict=True):
        learner.scores(x)
        learner.predict(x)
        learner.trial(x, y)
    learner.decide_many(xs[:3])
    frozen = learner.snapshot()
    frozen.scores(xs[0])
    frozen.predict(xs[0])
    weights = getattr(learner, "weights", None)
    if weights is not None:
        weights()
    for name in ("learn_prefix", "learn_expert_prefix"):  # a worker's, a backtest's replay
        learn_prefix = getattr(learner, name, None)
        if learn_prefix is not None:
            learn_prefix(xs, ys)
    if not round_trip:
        return
    again = from_state(json.loads(json.dumps(learner.export_state())))
    for x, y in zip(xs[:2], ys, strict=False):
        again.trial(x, y)
        again.predict(x)


@functools.cache
def _source_keyed_dir() -> str:
    """``committee-numba/<hash of every source file of models>`` in the user's cache
    directory (else the temporary one), made; "" when neither is writable."""
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
    return ""  # nowhere writable: numba's own default


# the folders a cached kernel's source may lie in, each with the prefix its cache
# sub-folder takes: numba's own package (its typed lists; it may be inside the
# project's folder, in a virtual environment there), and this project's
_ROOTS = (
    (str(Path(numba.__file__).resolve().parent), "numba"),
    (str(Path(__file__).resolve().parents[1]), "src"),
)


def _subfolder(py_file: str) -> str | None:
    """The cache sub-folder of a kernel defined in ``py_file``: its folder's path within
    one of ``_ROOTS``, flattened; None outside them."""
    folder = os.path.dirname(os.path.realpath(py_file))
    for root, prefix in _ROOTS:
        if os.path.commonpath([root, folder]) == root:
            return f"{prefix}_{os.path.relpath(folder, root).replace(os.sep, '_')}"
    return None


class CheckoutCacheLocator(UserProvidedCacheLocator):
    """numba's locator for a cache directory of one's own, but for the sub-folder a kernel
    is kept in: named after its source's folder within the project (or numba), not after
    the absolute path. Another checkout of the same sources (a fresh clone, CI's) finds
    the kernels compiled already; numba stamps each cached kernel with a hash of its
    source file's content, so a file changed in one checkout is compiled again."""

    def __init__(self, py_func: Any, py_file: str) -> None:
        super().__init__(py_func, py_file)
        folder = _subfolder(py_file)
        assert folder is not None  # from_function made sure
        self._cache_path = os.path.join(numba.config.CACHE_DIR, folder)  # type: ignore[attr-defined]

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> CheckoutCacheLocator | None:
        if _subfolder(py_file) is None:
            return None  # elsewhere: numba's own locators
        return super().from_function(py_func, py_file)


# tried in turn for each kernel once the cache is placed: ours, then numba's
_LOCATORS = ",".join(
    [f"{__name__}.CheckoutCacheLocator"]
    + [f"numba.core.caching.{c.__name__}" for c in CacheImpl._locator_classes]
)


# numba's own kernels that ours call from Python (the typed lists of arrays V-Combine's
# compiled trial is given): numba does not cache them, so each process would compile
# them again, over a second on this machine
NUMBA_OWN: tuple[Dispatcher, ...] = (typedlist._make_list, typedlist._append)


def place_cache(*modules: ModuleType) -> str:
    """Put numba's on-disk cache in the directory keyed on the sources of ``models`` (or
    in ``NUMBA_CACHE_DIR``'s), laid out by :class:`CheckoutCacheLocator`, and point at it
    every cached kernel defined so far in ``models`` and in ``modules`` (a kernel finds its
    cache when it is defined, so those defined before found numba's default), and numba's
    own in ``NUMBA_OWN``; the directory, "" for numba's default."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        target = str(numba.config.CACHE_DIR)  # type: ignore[attr-defined]
    else:
        target = _source_keyed_dir()
        if not target:
            return ""
        numba.config.CACHE_DIR = target  # type: ignore[attr-defined]
    numba.config.CACHE_LOCATOR_CLASSES = _LOCATORS  # type: ignore[attr-defined]
    ours = [m for name, m in list(sys.modules.items()) if name.startswith("models.")]
    cached = [
        k
        for m in [*ours, *modules]
        for k in list(vars(m).values())
        if isinstance(k, Dispatcher) and isinstance(getattr(k, "_cache", None), FunctionCache)
    ]
    for kernel in [*cached, *NUMBA_OWN]:  # (numba's own are not cached but by us)
        if not _placed(kernel, target):
            kernel.enable_caching()
    return target


def _placed(kernel: Dispatcher, target: str) -> bool:
    """Whether ``kernel`` is cached where :class:`CheckoutCacheLocator` puts it in
    ``target``."""
    cache = getattr(kernel, "_cache", None)
    folder = _subfolder(kernel.py_func.__code__.co_filename)
    return (
        isinstance(cache, FunctionCache)
        and folder is not None
        and cache.cache_path == os.path.join(target, folder)
    )


def warm_drift() -> float:
    """Run every drift detector's compiled paths (a value, a stream, a state round trip
    after a drift); return the seconds."""
    start = time.perf_counter()
    stream = np.r_[np.zeros(200), np.ones(200)]
    for cls in DETECTORS.values():
        detector = cls()
        detector.update(1)
        detector.update_many(stream)
        again = cls()
        again.import_state(json.loads(json.dumps(detector.export_state())))
        again.update(0.0)
    return time.perf_counter() - start


def warm_kernels(kinds: Iterable[str] | None = None) -> dict[str, float]:
    """Run the warm-up of every kind (or of ``kinds``) on the cache :func:`place_cache`
    places; return seconds per kind.

    The kinds share kernels, so on a cold cache the first ones take most of the time.
    """
    place_cache()
    out = {}
    for kind in KINDS if kinds is None else kinds:
        start = time.perf_counter()
        n = VOTING_TRIALS if kind in ("v-combine", "vr-combine") else TRIALS
        for spec, space in cases(kind):
            run_case(spec, space, n, round_trip=spec != PRESET)
        out[kind] = time.perf_counter() - start
    if kinds is None and out:
        out[next(iter(out))] += warm_drift()
    return out
