"""The kernel warm-up: after it, the first requests of every learner kind compile nothing,
and a service warms up before it is ready while its event loop keeps answering.

The first test compares the specializations of every numba dispatcher in ``models`` before
and after serving models the warm-up never saw (other parameters, integer and float
values, other inputs and label counts), through the service's own code paths: encoding,
prediction, a worker's batch replay, log entries decoded from Redis' binary form, the
dashboard summary, and a state export read back by a fresh worker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import numba
import numpy as np
import orjson
from _procs import Service
from numba.core.dispatcher import Dispatcher

from app.core.settings import Settings
from app.http.main import create_app
from app.http.routers.health import WARMING
from app.service.budget import Limits
from app.service.live_model import LiveModel
from app.service.summary import summarize
from app.service.warmup import Warmup, warm_worker
from models.inputs.batch import RawExperts, RawFeatures
from models.registry import KINDS
from storage.codec import decode_instance, encode_instance, encode_instances

BINARY, INTS, MULTI = ["pos", "neg"], [1, -1], ["a", "b", "c", "d", "e"]
DENSE = {"attributes": {"n_features": 10}}
SPARSE = {"attributes": {"n_features": 50, "constant_attribute": True}}
NAMED = {"attributes": {"feature_names": ["x", "y", "z", "w"]}}
HASHED = {"attributes": {"hashing": {"n_features": 64, "seed": 7}, "constant_attribute": True}}
EXPERTS = {"experts": {"expert_names": ["c1", "c2", "c3", "c4"], "threshold_experts": True}}
SCORES = {"experts": {"expert_names": ["c1", "c2", "c3"]}}  # deployed classifiers' scores
FUSION = {
    "experts": {"expert_names": ["c1", "c2"], "normalize": "argmax", "split_classes": "all"},
    "attributes": {"n_features": 5},
}
POOL = {  # subsets' averages: a compiled pass of their own
    "experts": {
        "expert_names": ["c1", "c2", "c3", "c4"],
        "normalize": ["sum-to-one", "rank"],
        "combinations": {"size": 3, "by": ["score", "rank"]},
    }
}
SUB_ALMA = {"kind": "subexpert", "learner": {"kind": "alma", "p": 3}}
SUB_PERCEPTRON = {"kind": "subexpert", "learner": {"kind": "perceptron", "eta": 2}}
RECYCLED = {"kind": "recycling", "size": 10, "max_updates": 2, "learner": SUB_PERCEPTRON}
PERCEPTRON = {"kind": "perceptron", "eta": 0.5}
ROOMY = Limits(learners=4096)  # budgets are not what these tests are about
CASES: list[tuple[dict[str, Any], dict[str, Any], list[Any]]] = [
    ({"kind": "winnow", "alpha": 2, "theta": 5}, DENSE, INTS),
    ({"kind": "winnow", "alpha": 1.5, "beta": 0.25, "theta_minus": 1, "theta_plus": 3.5,
      "demotion": "eliminate", "strict": True, "init": 2}, SPARSE, BINARY),
    ({"kind": "balanced-winnow", "alpha": 3, "theta": 0}, SPARSE, BINARY),
    ({"kind": "balanced-winnow", "alpha": 1.05, "theta": 0.5, "init_pos": 2, "beta": 0.5,
      "update_on_zero_margin": False, "strict": True}, DENSE, INTS),
    ({"kind": "perceptron", "eta": 1}, NAMED, BINARY),
    (PERCEPTRON, HASHED, INTS),
    ({"kind": "alma", "p": 2, "C": 1, "B": 1}, DENSE, BINARY),
    ({"kind": "alma", "p": 4.5, "alma_alpha": 0.5}, HASHED, BINARY),
    ({"kind": "committee", "alpha": 2}, EXPERTS, MULTI),
    ({"kind": "committee", "alpha": 1.5}, FUSION, BINARY),
    ({"kind": "committee"}, DENSE, MULTI),
    ({"kind": "committee"}, SCORES, MULTI),
    ({"kind": "multiclass-winnow", "alpha": 3, "init": 2}, EXPERTS, MULTI),
    ({"kind": "weighted-majority", "beta": 0, "update": "on_mistake"}, EXPERTS, MULTI),
    ({"kind": "weighted-majority"}, FUSION, BINARY),
    ({"kind": "fusion"}, POOL, MULTI),
    ({"kind": "committee", "weight_floor": 0.1, "fixed_share": 0.01}, POOL, BINARY),
    ({"kind": "subexpert", "learner": {"kind": "balanced-winnow", "alpha": 2}}, EXPERTS, MULTI),
    (SUB_PERCEPTRON, FUSION, BINARY),
    ({**SUB_ALMA, "subexpert_z": "predicted"}, EXPERTS, MULTI),
    ({"kind": "recycling", "size": 10, "learner": {"kind": "balanced-winnow"}}, SPARSE, BINARY),
    ({"kind": "recycling", "max_updates": 2, "learner": {"kind": "committee"}}, EXPERTS, MULTI),
    ({"kind": "recycling", "learner": {"kind": "weighted-majority"}}, FUSION, MULTI),
    ({"kind": "recycling", "learner": SUB_ALMA}, EXPERTS, MULTI),
    ({"kind": "averaging", "learner": {"kind": "winnow"}}, DENSE, BINARY),
    ({"kind": "averaging", "learner": {"kind": "balanced-winnow", "alpha": 2}}, SPARSE, INTS),
    ({"kind": "averaging", "learner": {"kind": "committee"}}, EXPERTS, MULTI),
    ({"kind": "averaging", "learner": RECYCLED}, FUSION, MULTI),
    ({"kind": "averaging", "learner": {"kind": "recycling", "learner": PERCEPTRON}}, DENSE, INTS),
    ({"kind": "ecoc", "learner": PERCEPTRON, "code": "one-per-class"}, DENSE, MULTI),
    ({"kind": "ecoc", "learner": {"kind": "balanced-winnow"}, "code": "dense",
      "decoding": "loss"}, SPARSE, MULTI),
    ({"kind": "ecoc", "learner": {"kind": "alma"}, "code": "random", "length": 6}, NAMED, MULTI),
    ({"kind": "bagging", "learner": {"kind": "winnow"}, "vote": "scores"}, DENSE, BINARY),
    ({"kind": "bagging", "learner": {"kind": "committee"}, "n_models": 3}, EXPERTS, MULTI),
    ({"kind": "boosting", "learner": PERCEPTRON, "n_models": 3}, HASHED, BINARY),
    ({"kind": "boosting", "learner": SUB_ALMA}, FUSION, MULTI),
    ({"kind": "v-combine", "h": 4, "learners": [PERCEPTRON, {"kind": "averaging",
      "learner": PERCEPTRON}, {"kind": "balanced-winnow"}]}, DENSE, BINARY),
    ({"kind": "v-combine", "select": "weighted-majority", "wm_update": "on_mistake",
      "learners": [{"kind": "committee"}, {"kind": "weighted-majority"}]}, EXPERTS, MULTI),
    ({"kind": "v-combine", "h": 6, "learners": [RECYCLED, {"kind": "averaging",
      "learner": RECYCLED}]}, EXPERTS, MULTI),
    ({"kind": "vr-combine"}, EXPERTS, MULTI),
    ({"kind": "vr-combine"}, FUSION, BINARY),
    ({"kind": "vr-combine", "alphas": [2, 1.5], "ps": [2, 4], "size": 20, "h": 4}, DENSE, MULTI),
]  # fmt: skip


def specializations() -> set[tuple[str, str]]:
    """(function, argument types) of every compiled specialization in ``models``."""
    out = set()
    for name, module in list(sys.modules.items()):
        if name != "models" and not name.startswith("models."):
            continue
        for value in vars(module).values():
            if isinstance(value, Dispatcher):
                f = value.py_func
                where = f"{f.__module__}.{f.__qualname__}"
                out |= {(where, str(sig)) for sig in value.signatures}
    return out


def payloads(config: dict[str, Any], n: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    out = []
    for t in range(n):
        p: dict[str, Any] = {}
        attrs = config["input"].get("attributes")
        if attrs is not None:
            if "feature_names" in attrs:
                p["features"] = {k: 1 for k in attrs["feature_names"][: 1 + t % 3]}
            elif "hashing" in attrs:
                p["features"] = {f"t{t % 7}": 0.5, f"u{t % 5}": 0.25}
            else:
                d = attrs["n_features"]
                dense = (rng.random(d) < 0.4).astype(float) * [1.0, 0.5][t % 2]
                p["features"] = dense.tolist() if t % 3 else {str(i): 1 for i in range(0, d, 7)}
        experts = config["input"].get("experts")
        if experts is not None:
            labels = config["labels"]
            names = experts["expert_names"]
            p["experts"] = {
                names[0]: labels[t % len(labels)],
                names[1]: rng.random(len(labels)).tolist(),
            }
        out.append(p)
    return out


def serve_first_requests(config: dict[str, Any]) -> None:
    """What a worker does for a new model's first requests, and a fresh worker after it."""
    rng = np.random.default_rng(1)
    m = LiveModel("warm", "i1", config, limits=ROOMY)
    items = payloads(config, 20, rng)
    xs = m.encode_each(items)
    assert not [x for x in xs if isinstance(x, Exception)], xs
    ys = rng.integers(0, m.k, len(xs)).tolist()
    m.predict(m.encode(items[0]))
    m.predict_many(xs[:4])  # a group of predictions
    for member in ("experts", "features"):  # as the fast path hands them over, unparsed
        got = items[0].get(member)
        if isinstance(got, dict):
            text = orjson.dumps(got)
            raw = (RawExperts if member == "experts" else RawFeatures)(text, 0, len(text))
            for together in ([raw], [raw, raw]):  # a lone request's, and a group's
                assert not [x for x in m.encode_each(together) if isinstance(x, Exception)]
    m.apply_own(1, list(zip(xs, ys, strict=True)))  # a learn batch this worker appended
    got = items[0].get("features")
    if isinstance(got, dict):  # a learn batch read from its body: the rows of one batch
        text = orjson.dumps(got)
        rows = m.encode_each([RawFeatures(text, 0, len(text))] * len(ys))
        encode_instances(rows)  # as stored
        m.apply_own(m.version + 1, list(zip(rows, ys, strict=True)))
    logged = [  # learn entries other workers appended, as read back from Redis
        (f"{m.version + 1 + t}-0".encode(), [b"k", b"n", b"x", encode_instance(x), b"y", b"%d" % y])
        for t, (x, y) in enumerate(zip(xs[:3], ys, strict=False))
    ]
    m.apply(logged)
    alone = xs[:2]
    if config["input"] == SCORES:  # every sub-expert scoring every label
        names = config["input"]["experts"]["expert_names"]
        alone.append(m.encode({"experts": {n: rng.random(m.k).tolist() for n in names[:2]}}))
    for x in alone:  # an entry read alone, as a backtest reads the log
        decode_instance(encode_instance(x), m.size, m.k)
    m.predict(xs[1])
    summarize(m)
    again = LiveModel("warm", "i1", config, version=m.version, state=m.export(), limits=ROOMY)
    again.apply_own(again.version + 1, list(zip(xs[:2], ys, strict=False)))
    again.predict(xs[0])
    assert again.quarantined == m.quarantined == 0


def test_after_the_warm_up_the_first_requests_compile_no_kernel():
    warm_worker()  # what a worker runs before /readyz: the learners' kernels and the rest
    before = specializations()
    for spec, inp, labels in CASES:
        serve_first_requests({"labels": labels, "input": inp, "learner": spec, "label_ttl": 60.0})
    missed = sorted(specializations() - before)
    assert not missed, "compiled after the warm-up:\n" + "\n".join(map(str, missed))


def test_committee_warm_prints_every_kinds_seconds():
    """What the Dockerfile runs at build time (here it mostly loads the cached kernels)."""
    out = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "warm"],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    ).stdout
    lines = out.splitlines()
    assert lines[0].startswith("numba cache: ")
    kinds = [line.split()[0] for line in lines[1:]]
    assert kinds == [*KINDS, "total"], out
    assert all(float(line.split()[1]) >= 0 for line in lines[1:])


# a worker's warm-up in a process of its own: the names of the kernels numba compiled
# (loading one from the cache is not compiling it)
COMPILES = """
from numba.core import event
from app.service.warmup import warm_worker
names = []
class Compiles(event.Listener):
    def on_start(self, ev):
        names.append(str(ev.data["dispatcher"].py_func))
    def on_end(self, ev):
        pass
with event.install_listener("numba:compile", Compiles()):
    warm_worker()
print(*names, sep="\\n")
"""


def test_a_workers_warm_up_on_a_filled_cache_compiles_nothing():
    """Every kernel a worker runs comes from the disk cache once one process filled it,
    numba's own that build the typed lists of V-Combine's compiled trial included (numba
    does not cache those itself: each worker compiled them again)."""
    for _ in range(2):  # the first may fill the cache
        out = subprocess.run(
            [sys.executable, "-c", COMPILES],
            capture_output=True,
            text=True,
            check=True,
            timeout=900,
        ).stdout
    assert out.split() == [], out


def test_another_checkout_of_the_same_sources_compiles_nothing(tmp_path: Path):
    """A fresh clone elsewhere (CI's, a second working copy) loads what this checkout's
    warm-up put in the cache: the cache is keyed on the sources' content and their folders
    within the project, not on where the checkout lies."""
    here = Path(__file__).resolve().parents[2]
    copy = tmp_path / "checkout"
    skip = shutil.ignore_patterns("__pycache__")
    for package in ("models", "app", "storage"):
        shutil.copytree(here / package, copy / package, ignore=skip)
    runs = []
    for cwd in (here, copy):  # the first may fill the cache
        env = {**os.environ, "PYTHONPATH": str(cwd)}
        script = f"import models; print(models.__file__)\n{COMPILES}"
        runs.append(
            subprocess.run(
                [sys.executable, "-c", script],
                capture_output=True,
                text=True,
                check=True,
                timeout=900,
                cwd=cwd,
                env=env,
            ).stdout.split()
        )
    source, *compiled = runs[1]
    assert Path(source).is_relative_to(copy), source
    assert compiled == [], compiled


# a process that imported the whole service before it placed the cache, as a benchmark or
# the command line does: each cached kernel of models and app, and whether it is placed
PLACED = """
import os, sys
from numba.core.caching import FunctionCache
from numba.core.dispatcher import Dispatcher
import app.http.main
from app.service.warmup import place_worker_cache
target = place_worker_cache()
for name, module in list(sys.modules.items()):
    if not name.startswith(("models.", "app.")):
        continue
    for kernel in vars(module).values():
        cache = getattr(kernel, "_cache", None)
        if isinstance(kernel, Dispatcher) and isinstance(cache, FunctionCache):
            placed = os.path.commonpath([target, cache.cache_path]) == target
            print(name, kernel.py_func.__name__, placed)
"""


def test_placing_the_cache_late_still_reaches_every_kernel_of_models_and_app():
    """Kernels defined before the cache is placed found numba's default folder beside
    their sources (which a fresh clone lacks, so each compiled them again): placing it
    moves every one of them, the app's own (the body reader's, the scorecards') too."""
    out = subprocess.run(
        [sys.executable, "-c", PLACED], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    rows = [line.split() for line in out.splitlines()]
    assert [r for r in rows if r[2] != "True"] == []
    modules = {r[0] for r in rows}
    assert {"app.core.jsontext", "app.service.scorecards"} <= modules, modules
    assert any(m.startswith("models.kernels.") for m in modules), modules


# -- the service: ready only once warm ------------------------------------------------------


class NotYet:
    """A warm-up that never ends."""

    ready = False
    error = None

    async def wait(self) -> None:  # pragma: no cover - never awaited here
        raise AssertionError("a learner was built while warming up")


def test_readyz_answers_503_until_the_warm_up_is_done(api_settings: Settings, server_thread):
    app = create_app(api_settings)
    with server_thread(api_settings, app) as server, httpx.Client(base_url=server.url) as c:
        warmup = app.state.warmup
        assert isinstance(warmup, Warmup)
        app.state.warmup = NotYet()
        r = c.get("/readyz")
        assert r.status_code == 503 and r.json() == {"detail": WARMING}
        assert int(r.headers["Retry-After"]) > 0
        assert c.get("/healthz").status_code == 200
        app.state.warmup = warmup
        while c.get("/readyz").status_code == 503:  # the real one, shared by the process
            time.sleep(0.05)
        assert c.get("/readyz").json() == {"status": "ready"}
        assert warmup.ready and warmup.error is None and warmup.seconds


def test_warm_up_switched_off_leaves_readiness_to_redis(api_settings: Settings, server_thread):
    settings = api_settings.model_copy(update={"warmup": False})
    app = create_app(settings)
    with server_thread(settings, app) as server, httpx.Client(base_url=server.url) as c:
        assert app.state.warmup is None and app.state.service.warmup is None
        assert c.get("/readyz").json() == {"status": "ready"}


class Starting(Service):
    """``committee serve`` started without waiting for /readyz."""

    def start(self) -> Service:
        return self.spawn()


def cache_without(module: str, target: Path) -> None:
    """Make ``target`` a numba cache holding every kernel the warm-up compiles but those of
    ``models/kernels/<module>.py``: a service given it compiles that module's kernels alone
    (a whole compile takes a minute or two, this one a fraction of it)."""
    warm_worker()  # in this process, which fills the shared cache where it is cold
    shared = numba.config.CACHE_DIR  # type: ignore[attr-defined]
    if not shared:  # no cache here: the service compiles everything
        target.mkdir()
        return
    prefix = f"{module}."

    def left_out(_: str, names: list[str]) -> list[str]:
        # and the files numba is writing (``<file>.tmp.<id>``, renamed once written),
        # which another test process may rename while this one copies
        return [n for n in names if n.startswith(prefix) or ".tmp." in n]

    shutil.copytree(shared, target, ignore=left_out)


def cached(cache: Path, module: str) -> list[str]:
    return sorted(p.name for p in cache.rglob(f"{module}.*.nbi"))


def test_a_fresh_service_answers_healthz_while_it_compiles_then_serves_vr_combine(
    tmp_path: Path, redis_url: str
):
    """A numba cache of the service's own without the voting kernels, which vr-combine
    runs: the service compiles them while it warms up."""
    cache = tmp_path / "numba"
    cache_without("voting", cache)
    assert cached(cache, "voting") == []
    env = {"NUMBA_CACHE_DIR": str(cache)}
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    with Starting(tmp_path, redis_url=redis_url, prefix=prefix, env=env) as service:
        # every /healthz within 2 s, or the client times out and the test fails
        with httpx.Client(base_url=service.url, timeout=2.0) as c:
            seen, checks = [], 0
            deadline = time.monotonic() + 900
            while True:
                assert service.process is not None and service.process.poll() is None, (
                    service.output()
                )
                assert time.monotonic() < deadline, service.output()
                try:
                    health = c.get("/healthz")
                except httpx.ConnectError:  # not listening yet
                    time.sleep(0.1)
                    continue
                assert health.status_code == 200
                checks += 1
                r = c.get("/readyz")
                seen.append(r.status_code)
                if r.status_code == 200:
                    break
                assert r.status_code == 503 and r.json() == {"detail": WARMING}, r.text
                time.sleep(0.2)
        assert seen.count(503) >= 3 and checks >= 4, seen  # it did warm up, answering
        assert cached(cache, "voting") != []  # it compiled them before it was ready
        with httpx.Client(base_url=service.url, timeout=30.0) as c:
            model = {
                "name": "vr",
                "labels": MULTI,
                "input": EXPERTS,
                "learner": {"kind": "vr-combine"},
            }
            assert c.post("/v1/models", json=model).status_code == 201
            item = payloads(model, 1, np.random.default_rng(0))[0]
            r = c.post("/v1/models/vr/learn", json={"instance": item, "label": "a"})
            assert r.status_code == 200, r.text
            assert r.json()["label"] == "a"
