"""The HTTP service under load, beside an empty FastAPI endpoint measured in the same run.

Two uvicorn servers run side by side, each one worker process with uvloop and httptools
at log level warning: the service (``app.http.main:create_app`` over a private append-only
Redis in a temporary directory) and its peer, an empty FastAPI app whose one ``POST``
endpoint parses a two-field pydantic body and returns a small object
(``bench/_service_peer.py``). One load generator (``bench/_service_load.py``) runs in a
process of its own, with 32 closed-loop keep-alive clients, and drives both alike. It
first measures its own ceiling on the empty endpoint with two clients (httpx's
``AsyncClient``, and raw asyncio HTTP/1.1 on uvloop) and uses the faster for every figure.

Figures, each over ``--seconds`` after a warm-up, the best of ``--rounds`` rounds (the
phases take turns, so a burst of load from elsewhere hits them alike): requests/s and
p50 / p99 latency of the round with the best rate (a ratio of p99s takes each side's
lowest p99 of its rounds, since the two sides' tails move from round to round apart
from their rates) of

* the empty endpoint;
* ``predict`` (tracked, each with a new trial id), ``label`` (of trials predicted
  beforehand, in order) and ``learn`` on a Balanced Winnow model of 10,000 features,
  instances of 20 active features (the sparse stream of ``bench/learners.py``,
  ``sparse_disjunction_stream``);
* ``learn/batch`` with 1,000 items per request, 2 clients, on a fresh model of the same
  stream: trials/s;
* ``label`` on fresh models of 10,000 and of 1,000,000 features, the same sparsity,
  measured back to back: the ratio of their p50 latencies;
* the fusion shapes, ``predict``, ``label`` and ``learn`` on Committee models whose
  sub-experts post a score for every label as a mapping (``{"e3": {"0": 0.61, "1":
  0.07, ...}}``): 6 experts x 10 labels (the digits fusion) and 25 x 5, against the
  **edge** peer (``bench/_service_edge.py``): the service's own middleware and a
  dispatcher that parses each body with orjson and answers, nothing behind it. The
  service's share of its edge's throughput, and their p99s, are the headline ratios.
  Beside them, the edge keeping each trial: the same calls under ``/append``, gathered
  as the service gathers a model's calls and appended to a Redis stream of the same
  Redis, one script call per group, before each is answered. That is the least a
  service that keeps every trial must do beside parsing, so ``append_vs_edge_*`` says
  how much of the edge such a service can reach at most, and ``*_vs_append_*`` the
  service's share of that (information, no target). Beside them too, in the same turns,
  the service's ``predict`` with ``"track": false``, which stores nothing and answers
  from the worker's copy of the model: ``untracked_predict_vs_edge`` (information) says
  how much of the tracked prediction's distance from its edge is the pending trial's;
* ``learn`` on a second 6 x 10 fusion model with a shadow challenger of its own spec
  attached, right after the first's ``learn`` in each round: what the challenger adds to
  a trial, ``challenger_cost_vs_none`` (the rate without over the rate with, less 1);
* ``learn/batch`` against the edge parsing the same batches and answering their item
  count (``batch_learn_vs_parse_only``), and against the edge parsing them and appending
  each item to a Redis stream of the same Redis, one script call per batch
  (``batch_learn_vs_parse_and_append``): Redis alone spends several times the parse's
  CPU on each trial the service keeps, so the second is the ceiling of a service that
  keeps what it learns;
* the statistics read (``GET /v1/models/bw/stats``) while the model learns about 1,000
  trials/s: single ``learn`` requests sent at that rate, open loop, from the start of the
  warm-up to the end of the phase, beside 4 clients reading back to back; the same
  number of reads (5,000; 200 with ``--quick``) and the same background learns go to the
  edge, which answers the document the service answered just before, written by orjson
  ahead of the router as the service's is. Their p99s: ``stats_p99_vs_edge_p99``;
* ``predict`` on a second service process, the same in every way but that auth is on:
  every request carries an API key, checked, scoped and rate limited (limits far above
  the load, so that none is refused), against the first's ``predict`` measured in the
  same rounds (the two take turns going first), each side's best rate:
  ``predict_auth_vs_no_auth``.

With each phase come the CPU microseconds per request of the server, of Redis and of the
generator itself, and the cores every other process used, read from ``/proc`` over the
window: on a 2-core machine these compete, so this says what bounds a figure. So does
``*_cpu_wait``, the share of the window in which any runnable process waited for a core
(the kernel's CPU pressure): a server idle while it is low was waiting on Redis or its
clients, not on the machine. A phase that watches Redis also says how often it forked
(``*_redis_forks``): Redis rewrites its append-only file in a forked child once the file
has grown enough, and a phase that meets a rewrite pays for it (the child's CPU shows
among the other processes). Each phase starts once the machine is idle, so that what the
last one left running (a snapshot, Redis rewriting its append-only file) does not land
in it.

Run as ``python bench/service.py [--quick] [--seconds S] [--warmup W] [--rounds R]``
(3 s after 1 s, 3 rounds; ``--quick``, a smoke run: 0.15 s after 0.1 s, one round,
shorter streams). Figures are printed as ``name: value`` lines, targets beside them
(printed, never asserted), with how far the rounds spread; the empty FastAPI endpoint's
ratios are kept as information. The last line is ``predict_vs_edge: <ratio>``.
"""

from __future__ import annotations

import argparse
import itertools
import math
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import redis as redis_py
from _results import recorded
from _service_load import ID, Background, Plan, Result, busy_seconds
from _service_load import run as run_plan

from models.inputs.datasets import sparse_disjunction_stream
from storage.server import PID_NAME, EmbeddedRedis

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
# the sparse stream of bench/learners.py: 20 active features of which the last is a
# constant, label +1 iff one is relevant (350 of 10,000, scaled with the feature count)
N_FEATURES = 10_000
N_FEATURES_LARGE = 1_000_000
N_ACTIVE = 20
N_RELEVANT = 350
NOISE = 0.05
LABELS = [1, -1]
ALPHA = 1.1
CONCURRENCY = 32
BATCH_ITEMS = 1_000
BATCH_CONCURRENCY = 2
PRECREATE_ITEMS = 1_000  # items per /predict/batch when creating pending trials
STATS_CONCURRENCY = 4  # clients reading statistics back to back
STATS_READS, QUICK_STATS_READS = 5_000, 200  # reads measured on each side
# --quick: seconds timed per phase, after a warm-up of seconds (--seconds, --warmup)
QUICK_PHASES = (0.15, 0.1)
QUIET_CORES = 0.15  # a phase starts once the machine is this idle (see quiet)
STATS_LEARNS_PER_S = 1_000.0  # the learns the model takes meanwhile
UVICORN = ["--host", "127.0.0.1", "--loop", "uvloop", "--http", "httptools"]
UVICORN += ["--log-level", "warning", "--no-access-log"]
EMPTY_BODY = b'{"name":"probe","value":1.5}'
JSON = {"content-type": "application/json"}

FUSION_SHAPES = {"6x10": (6, 10), "25x5": (25, 5)}  # experts x labels
FUSION_ALPHA = 1.2
CHALLENGED = "6x10"  # the fusion shape also measured with a shadow challenger

TARGETS = {
    "predict_vs_edge": (">=", 0.7),
    "label_vs_edge": (">=", 0.45),
    "learn_vs_edge": (">=", 0.45),
    "predict_p99_vs_edge_p99": ("<=", 2.0),
    "label_p99_vs_edge_p99": ("<=", 2.0),
    "learn_p99_vs_edge_p99": ("<=", 2.0),
    "stats_p99_vs_edge_p99": ("<=", 2.0),
    "batch_learn_vs_parse_only": (">=", 0.5),
    "batch_learn_vs_parse_and_append": (">=", 0.5),
    "predict_vs_empty_endpoint": (">=", 0.5),
    "label_vs_empty_endpoint": (">=", 0.35),
    "learn_vs_empty_endpoint": (">=", 0.35),
    "predict_p99_vs_empty_p99": ("<=", 2.0),
    "label_p99_vs_empty_p99": ("<=", 2.0),
    "learn_p99_vs_empty_p99": ("<=", 2.0),
    "batch_learn_trials_per_s": (">=", 50_000.0),
    "label_latency_1m_vs_10k": ("<=", 1.5),
    "predict_auth_vs_no_auth": (">=", 0.9),
    "challenger_cost_vs_none": ("<=", 0.2),
}
TARGETS |= {
    f"{op}_vs_edge_{shape}": TARGETS[f"{op}_vs_edge"]
    for op in ("predict", "label", "learn")
    for shape in FUSION_SHAPES
}
# the auth service's key: limits far above what the generator can send
AUTH_LIMITS = {"requests_per_second": 1e8, "trials_per_second": 1e8}


# -- servers ------------------------------------------------------------------------------


BIND_ATTEMPTS = 5
# seconds a readiness probe waits for its answer: the first waits FIRST_PROBE_TIMEOUT, and
# each that gets none waits twice as long as the one before, up to PROBE_TIMEOUT
FIRST_PROBE_TIMEOUT = 0.2
PROBE_TIMEOUT = 1.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Server:
    """One uvicorn process (a single worker, serving in the process itself)."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def uvicorn(
    name: str,
    target: list[str],
    env: dict[str, str],
    logs: Path,
    ready: Callable[[httpx.Client], bool],
    timeout: float = 180.0,
    module: str = "uvicorn",
) -> Iterator[Server]:
    """Serve ``target`` with the shared options on a free loopback port until exit, once
    ``ready`` (within ``timeout`` seconds: a service compiles its kernels before it is
    ready, minutes on a cold cache). ``module`` is run with uvicorn's arguments: uvicorn,
    or a module that prepares the process and then runs uvicorn (``_sampled``).

    A port is free when chosen but may be taken before the child binds it; the child then
    exits saying so, and the next attempt takes another port."""
    log = logs / f"{name}.log"
    environ = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(BENCH_DIR)])}
    for attempt in itertools.count(1):
        port = free_port()
        args = [sys.executable, "-m", module, *target, *UVICORN, "--port", str(port)]
        with open(log, "wb") as out:
            process = subprocess.Popen(
                args, cwd=ROOT, env=environ, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
        server = Server(name, process, port, log)
        try:
            if _started(server, ready, timeout):
                break
        except BaseException:
            _stop(process)
            raise
        if attempt == BIND_ATTEMPTS:
            raise RuntimeError(f"{name}: no free port in {BIND_ATTEMPTS} attempts")
    try:
        yield server
    finally:
        _stop(process)


def service_server(
    name: str, env: dict[str, str], logs: Path, module: str = "uvicorn"
) -> AbstractContextManager[Server]:
    """The service (``app.http.main:create_app``), ready once ``/readyz`` says so."""
    return uvicorn(
        name, ["app.http.main:create_app", "--factory"], env, logs, _ready, module=module
    )


def edge_server(
    env: dict[str, str], logs: Path, module: str = "uvicorn"
) -> AbstractContextManager[Server]:
    """The edge peer (``bench/_service_edge.py``), ready once ``/healthz`` answers."""
    target = ["_service_edge:create", "--factory", "--app-dir", str(BENCH_DIR)]
    return uvicorn("edge", target, env, logs, _healthy, module=module)


def _ready(http: httpx.Client) -> bool:
    return http.get("/readyz").status_code == 200


def _healthy(http: httpx.Client) -> bool:
    return http.get("/healthz").status_code == 200


def _started(server: Server, ready: Callable[[httpx.Client], bool], timeout: float) -> bool:
    """Wait until ``server`` is ready (True), or has exited because its port was taken
    (False); any other exit, or no readiness within ``timeout`` seconds, raises."""
    deadline = time.monotonic() + timeout
    # short timeouts: on a port taken by another listener a probe waits for no answer
    # while the child exits; a slow answer is only probed again, with more patience
    wait = FIRST_PROBE_TIMEOUT
    with httpx.Client(base_url=server.url, timeout=wait) as http:
        while True:
            if server.process.poll() is not None:
                text = server.log.read_text(errors="replace")
                if "address already in use" in text:
                    return False
                raise RuntimeError(f"{server.name} exited: {text[-2000:]}")
            try:
                if ready(http):
                    return True
            except httpx.TimeoutException:
                wait = min(2 * wait, PROBE_TIMEOUT)
                http.timeout = httpx.Timeout(wait)
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{server.name} not ready after {timeout} s")
            time.sleep(0.1)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)  # uvicorn's graceful shutdown (lifespan out)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- the workload -------------------------------------------------------------------------


@dataclass
class Stream:
    """Instances as JSON (``{"features": {"17": 1.0, ...}}``) and their labels."""

    instances: list[bytes]
    labels: list[int]

    @classmethod
    def sparse(cls, trials: int, n_features: int, seed: int) -> Stream:
        xb, y = sparse_disjunction_stream(
            trials,
            n_features=n_features,
            n_active=N_ACTIVE,
            n_relevant=round(N_RELEVANT * n_features / N_FEATURES),
            noise=NOISE,
            seed=seed,
        )
        ptr, idx, val = xb.indptr.tolist(), xb.indices.tolist(), xb.values.tolist()
        instances = [
            orjson.dumps({"features": {str(i): v for i, v in zip(idx[a:b], val[a:b], strict=True)}})
            for a, b in itertools.pairwise(ptr)
        ]
        return cls(instances, y.tolist())

    @classmethod
    def fusion(cls, trials: int, n_experts: int, k: int, seed: int) -> Stream:
        """Classifiers' scores for every label, as mappings: each expert right with its
        own accuracy (0.55-0.9), half its mass on its choice and the rest spread at
        random (Dirichlet), rounded to 4 places."""
        rng = np.random.default_rng(seed)
        y = rng.integers(k, size=trials)
        accuracy = rng.uniform(0.55, 0.9, size=n_experts)
        right = rng.random((trials, n_experts)) < accuracy
        top = np.where(right, y[:, None], rng.integers(k, size=(trials, n_experts)))
        p = rng.dirichlet(np.ones(k), size=(trials, n_experts)) / 2
        np.put_along_axis(p, top[..., None], np.take_along_axis(p, top[..., None], 2) + 0.5, 2)
        p = np.round(p, 4).tolist()
        keys = [str(c) for c in range(k)]
        instances = [
            orjson.dumps(
                {"experts": {f"e{e}": dict(zip(keys, row, strict=True)) for e, row in enumerate(t)}}
            )
            for t in p
        ]
        return cls(instances, y.tolist())

    def __len__(self) -> int:
        return len(self.instances)

    def predict_bodies(self) -> list[bytes]:
        """Tracked predictions whose trial id the generator fills in."""
        return [b'{"trial_id":"%s","instance":%s}' % (ID, x) for x in self.instances]

    def untracked_bodies(self) -> list[bytes]:
        """Predictions kept nowhere (``"track": false``): no trial id, nothing stored."""
        return [b'{"track":false,"instance":%s}' % x for x in self.instances]

    def learn_bodies(self) -> list[bytes]:
        return [
            b'{"instance":%s,"label":%d}' % (x, y)
            for x, y in zip(self.instances, self.labels, strict=True)
        ]

    def batch_bodies(self, items: int) -> list[bytes]:
        one = self.learn_bodies()
        return [
            b'{"items":[%s]}' % b",".join(one[i : i + items]) for i in range(0, len(one), items)
        ]


def model_spec(name: str, n_features: int) -> dict[str, object]:
    return {
        "name": name,
        "labels": LABELS,
        "input": {"attributes": {"n_features": n_features}},
        "learner": {"kind": "balanced-winnow", "alpha": ALPHA},
    }


def fusion_spec(name: str, n_experts: int, k: int) -> dict[str, object]:
    return {
        "name": name,
        "labels": list(range(k)),
        "input": {"experts": {"expert_names": [f"e{e}" for e in range(n_experts)]}},
        "learner": {"kind": "committee", "alpha": FUSION_ALPHA},
    }


def post(http: httpx.Client, path: str, body: bytes | dict[str, object]) -> object:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    r = http.post(path, content=content, headers=JSON)
    if r.status_code not in (200, 201):
        raise RuntimeError(f"POST {path}: {r.status_code} {r.text[:500]}")
    return r.json()


def create_and_prime(
    http: httpx.Client,
    name: str,
    n_features: int,
    stream: Stream,
    spec: dict[str, object] | None = None,
) -> None:
    """Create the model (by default the sparse Balanced Winnow one), and load it in the
    server with one call of each kind (this also compiles the learner's kernels there)."""
    post(http, "/v1/models", spec or model_spec(name, n_features))
    base = f"/v1/models/{name}"
    x, y = stream.instances[0], stream.labels[0]
    post(http, f"{base}/predict", b'{"trial_id":"prime","instance":%s}' % x)
    post(http, f"{base}/label", b'{"trial_id":"prime","label":%d}' % y)
    post(http, f"{base}/learn", stream.learn_bodies()[1])
    got = post(http, f"{base}/learn/batch", stream.batch_bodies(3)[1])
    assert isinstance(got, dict) and all(item["error"] is None for item in got["items"]), got


def precreate(
    http: httpx.Client, name: str, stream: Stream, prefix: str, count: int
) -> list[tuple[str, int]]:
    """``count`` pending trials (predictions awaiting a label) by ``/predict/batch``."""
    made: list[tuple[str, int]] = []
    for start in range(0, count, PRECREATE_ITEMS):
        chunk = range(start, min(count, start + PRECREATE_ITEMS))
        items = [
            b'{"trial_id":"%s%d","instance":%s}'
            % (prefix.encode(), i, stream.instances[i % len(stream)])
            for i in chunk
        ]
        got = post(http, f"/v1/models/{name}/predict/batch", b'{"items":[%s]}' % b",".join(items))
        assert isinstance(got, dict)
        if any(item["error"] is not None for item in got["items"]):
            raise RuntimeError(f"pre-creating trials of {name}: {got['items'][:3]}")
        made += [(f"{prefix}{i}", stream.labels[i % len(stream)]) for i in chunk]
    return made


def label_bodies(trials: Sequence[tuple[str, int]]) -> list[bytes]:
    return [b'{"trial_id":"%s","label":%d}' % (t.encode(), y) for t, y in trials]


# -- measuring ----------------------------------------------------------------------------


def quiet(most: float = QUIET_CORES, window: float = 0.2, patience: float = 15.0) -> None:
    """Wait until the machine has been nearly idle (below ``most`` cores busy) for a
    ``window``: work one phase left behind (a snapshot, Redis rewriting its append-only
    file) would otherwise run in the next phase's window, on either side's figure. After
    ``patience`` seconds (none with ``--quick``), go on regardless."""
    if patience <= 0:
        return
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        before = busy_seconds()
        time.sleep(window)
        if (busy_seconds() - before) / window < most:
            return
    print(f"  (the machine stayed busy for {patience:g} s: measuring anyway)", file=sys.stderr)


# how often a phase whose window completed no request is run again (each twice as long)
EMPTY_WINDOW_RETRIES = 4


class Runner:
    """Hands plans to the generator process and keeps every result, by phase and round;
    a phase whose window completed no request is run again with a longer window."""

    def __init__(
        self, pool: ProcessPoolExecutor, warmup: float, seconds: float, patience: float
    ) -> None:
        self.pool = pool
        self.warmup = warmup
        self.seconds = seconds
        self.patience = patience  # how long a phase waits for an idle machine
        self.client = "raw"
        self.results: dict[str, list[Result]] = {}
        # Redis, when a phase watches it: how often it forked during each phase (an
        # append-only file rewrite runs in a forked child and slows Redis meanwhile)
        self.redis: redis_py.Redis | None = None
        self.forks: dict[str, list[int | None]] = {}

    def __call__(
        self, name: str, server: Server, path: str, bodies: list[bytes], **kw: Any
    ) -> Result:
        kw.setdefault("concurrency", CONCURRENCY)
        plan = Plan(
            port=server.port,
            path=path,
            bodies=bodies,
            warmup=self.warmup,
            seconds=self.seconds,
            client=self.client,
            **kw,
        )
        watched = self.redis if "redis" in kw.get("watch", {}) else None
        for _ in range(EMPTY_WINDOW_RETRIES + 1):
            quiet(patience=self.patience)
            before = _forks(watched)
            result = self.pool.submit(run_plan, plan).result()
            forks = None if watched is None else _forks(watched) - before
            # a window in which no request completed (a slow client on a busy machine,
            # in a short window) gives no rate: run it again twice as long, unless its
            # bodies carry ids, which cannot be sent again
            if result.requests or plan.id_prefix is not None or not plan.cycle:
                break
            plan.seconds *= 2
        if result.errors:
            raise RuntimeError(
                f"{name}: {result.errors} requests failed, first {result.first_error}"
            )
        if result.exhausted:
            raise RuntimeError(f"{name}: ran out of request bodies after {result.issued}")
        self.results.setdefault(name, []).append(result)
        self.forks.setdefault(name, []).append(forks)
        others = result.cpu["others"] / result.seconds
        background = f", background {result.background_rate:,.0f} req/s" if plan.background else ""
        forked = f", Redis forked {forks}x (rewriting its append-only file)" if forks else ""
        print(
            f"  {name}: {result.rate:,.0f} req/s, p50 {result.p50_ms:.2f} ms, "
            f"p99 {result.p99_ms:.2f} ms, other processes {others:.2f} cores{background}{forked}",
            file=sys.stderr,
            flush=True,
        )
        return result

    def best(self, name: str) -> Result:
        """The round with the highest rate (a burst of load from elsewhere lowers a rate)."""
        return max(self.results[name], key=lambda r: r.rate)

    def least_p99(self, name: str) -> float:
        """The lowest p99 of the rounds, in ms (a burst from elsewhere raises a p99): a
        p99 ratio takes each side's own, as a rate ratio takes each side's best rate,
        not the p99 of the round whose rate was best (the two sides' tails move from
        round to round apart from their rates)."""
        return min(r.p99_ms for r in self.results[name])

    def forks_in(self, res: Result) -> int | None:
        """How often Redis forked during the round that gave ``res`` (None: its phase
        did not watch Redis)."""
        for name, results in self.results.items():
            for at, r in enumerate(results):
                if r is res:
                    return self.forks[name][at]
        return None


def _forks(client: redis_py.Redis | None) -> int:
    """The forks Redis made since it started (0 without a client)."""
    return 0 if client is None else int(client.info("stats")["total_forks"])


def line(
    name: str, value: float, digits: int = 2, targets: dict[str, tuple[str, float]] | None = None
) -> str:
    """``name: value``, with its target and whether it was met when it has one."""
    targets = TARGETS if targets is None else targets
    text = f"{name}: {value:.{digits}f}"
    if name in targets:
        op, bound = targets[name]
        met = value >= bound if op == ">=" else value <= bound
        text += f" (target {op} {bound:g}: {'met' if met else 'MISSED'})"
    return text


@dataclass
class Phases:
    """How long each timed phase runs, after how long a warm-up, over how many rounds."""

    quick: bool
    seconds: float
    warmup: float
    rounds: int
    seed: int


def phase_options(
    description: str,
    argv: Sequence[str] | None,
    seconds: float,
    quick: tuple[float, float] = (0.25, 0.15),
) -> Phases:
    """The command line shared by the benchmarks that time phases (``seconds`` by
    default; ``--quick``: short phases, ``quick`` giving their seconds and warm-up, one
    round)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"phases of {quick[0]:g} s after {quick[1]:g} s, one round: a smoke run",
    )
    parser.add_argument(
        "--seconds", type=float, default=None, help=f"timed seconds per phase ({seconds:g})"
    )
    parser.add_argument("--warmup", type=float, default=None, help="seconds before each (1)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds, best kept (3)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    got = Phases(
        args.quick,
        args.seconds if args.seconds is not None else (quick[0] if args.quick else seconds),
        args.warmup if args.warmup is not None else (quick[1] if args.quick else 1.0),
        args.rounds if args.rounds is not None else (1 if args.quick else 3),
        args.seed,
    )
    if got.seconds <= 0 or got.warmup < 0 or got.rounds < 1:
        parser.error("--seconds must be > 0, --warmup >= 0 and --rounds >= 1")
    return got


def main(argv: Sequence[str] | None = None) -> None:
    args = phase_options(__doc__.split("\n\n")[0], argv, 3.0, QUICK_PHASES)
    seconds, warmup, rounds = args.seconds, args.warmup, args.rounds
    trials = 1_000 if args.quick else 20_000
    stats_reads = QUICK_STATS_READS if args.quick else STATS_READS
    batch_trials = 2_000 if args.quick else 50_000

    streams = {
        "bw": (N_FEATURES, Stream.sparse(trials, N_FEATURES, args.seed)),
        "bw-batch": (N_FEATURES, Stream.sparse(batch_trials, N_FEATURES, args.seed + 1)),
        "label-10k": (N_FEATURES, Stream.sparse(trials, N_FEATURES, args.seed + 2)),
        "label-1m": (N_FEATURES_LARGE, Stream.sparse(trials, N_FEATURES_LARGE, args.seed + 2)),
    }
    main_stream = streams["bw"][1]

    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="svc-bench-")))
        redis = stack.enter_context(EmbeddedRedis(tmp / "redis"))
        redis_pid = int((redis.data_dir / PID_NAME).read_text())
        env = {
            "COMMITTEE_REDIS_URL": redis.url,
            "COMMITTEE_KEY_PREFIX": "bench",
            "COMMITTEE_LOG_LEVEL": "warning",
        }
        service = stack.enter_context(service_server("service", env, tmp))
        secured = stack.enter_context(
            service_server("service-auth", {**env, "COMMITTEE_KEY_PREFIX": "bench-auth"}, tmp)
        )
        peer = stack.enter_context(
            uvicorn(
                "peer",
                ["_service_peer:app", "--app-dir", str(BENCH_DIR)],
                {},
                tmp,
                lambda h: h.post("/ping", json={"name": "ready", "value": 0}).status_code == 200,
            )
        )
        edge = stack.enter_context(edge_server({"EDGE_REDIS_URL": redis.url}, tmp))
        http = stack.enter_context(httpx.Client(base_url=service.url, timeout=120.0))
        http_auth = stack.enter_context(httpx.Client(base_url=secured.url, timeout=120.0))
        http_edge = stack.enter_context(httpx.Client(base_url=edge.url, timeout=120.0))
        pool = stack.enter_context(
            ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        )
        run = Runner(pool, warmup, seconds, 0.0 if args.quick else 15.0)
        run.redis = stack.enter_context(redis_py.Redis.from_url(redis.url))
        on_peer = {"watch": {"server": peer.pid}}
        on_service = {"watch": {"server": service.pid, "redis": redis_pid}}
        for name, (n, stream) in streams.items():
            create_and_prime(http, name, n, stream)
        # the first key turns auth on for the second service
        admin = post(http_auth, "/v1/keys", {"scope": "admin"})
        assert isinstance(admin, dict)
        http_auth.headers["authorization"] = f"Bearer {admin['key']}"
        key = post(http_auth, "/v1/keys", {"scope": "write", "limits": AUTH_LIMITS})
        assert isinstance(key, dict)
        authorization = {"authorization": f"Bearer {key['key']}"}
        create_and_prime(http_auth, "bw", N_FEATURES, main_stream)
        on_secured = {"watch": {"server": secured.pid, "redis": redis_pid}}
        on_edge = {"watch": {"server": edge.pid}}
        on_edge_redis = {"watch": {"server": edge.pid, "redis": redis_pid}}
        fusion = {
            shape: Stream.fusion(trials, n, k, args.seed + 3 + i)
            for i, (shape, (n, k)) in enumerate(FUSION_SHAPES.items())
        }
        for shape, (n, k) in FUSION_SHAPES.items():
            name = f"fusion-{shape}"
            create_and_prime(http, name, 0, fusion[shape], fusion_spec(name, n, k))
        # the first shape again, with a shadow challenger of the same spec attached
        spec = fusion_spec(f"fusion-{CHALLENGED}-challenged", *FUSION_SHAPES[CHALLENGED])
        create_and_prime(http, str(spec["name"]), 0, fusion[CHALLENGED], spec)
        shadow = {"name": "shadow", "learner": spec["learner"]}
        post(http, f"/v1/models/{spec['name']}/challengers", shadow)

        # the generator's own ceiling: both clients on the empty endpoint
        for client in ("httpx", "raw"):
            run.client = client
            run(f"empty_{client}", peer, "/ping", [EMPTY_BODY], **on_peer)
        run.client = max(("raw", "httpx"), key=lambda c: run.best(f"empty_{c}").rate)

        def pending_needed() -> int:
            """Pending trials enough for one label phase, with a margin. The fast path can
            outrun the empty FastAPI endpoint, a label (whose instance a worker holds, or
            reads from the log, not the request) can outrun predict, and one phase may
            meet a burst of load from elsewhere that the next misses: the bound is the
            fastest of the empty endpoint, the service's predict and the edge's trial
            calls measured so far (the fast path's own ceiling), at most 3 times its
            fastest label so far, and never below that label. With ``--quick`` the
            windows are short enough that such a burst moves a rate by half or more, so
            the margin is twice as wide."""
            done = run.results
            kinds = ["empty", f"empty_{run.client}", "predict"]
            kinds += [k for k in done if k.startswith(("edge_predict", "edge_label", "edge_learn"))]
            cap = max(r.rate for k in kinds for r in done.get(k, []))
            labels = [r.rate for k, rs in done.items() if k.startswith("label") for r in rs]
            if labels:
                cap = max(min(cap, 3 * max(labels)), max(labels))
            return math.ceil(cap * (warmup + seconds) * (3.0 if args.quick else 1.5))

        def run_auth(k: int, bodies: list[bytes]) -> None:
            path = f"{base}/predict"
            ids = f"r{k}a"
            run(
                "predict_auth",
                secured,
                path,
                bodies,
                id_prefix=ids,
                headers=authorization,
                **on_secured,
            )

        def fusion_round(k: int, shape: str, stream: Stream) -> None:
            """The service, its edge and the edge keeping each trial in Redis (under
            ``/append``) on one fusion shape, taking turns going first."""
            base = f"/v1/models/fusion-{shape}"
            turn = 1 - 2 * (k % 2)
            sides = [
                (service, on_service, "", ""),
                (edge, on_edge, "edge_", ""),
                (edge, on_edge_redis, "append_", "/append"),
            ]
            # and the service's prediction that stores nothing, in the same turns
            predicts = [(service, on_service, "untracked_", ""), *sides][::turn]
            sides = sides[::turn]
            done = {}
            for server, watch, side, under in predicts:
                untracked = side == "untracked_"
                bodies = stream.untracked_bodies() if untracked else stream.predict_bodies()
                done[side] = run(
                    f"{side}predict_{shape}",
                    server,
                    f"{under}{base}/predict",
                    bodies,
                    id_prefix=f"r{k}{side}f",
                    **watch,
                )
            trials = [(f"r{k}f{i}", stream.labels[i % len(stream)]) for i in range(done[""].issued)]
            more = max(0, pending_needed() - len(trials))
            trials += precreate(http, f"fusion-{shape}", stream, f"r{k}g", more)
            for server, watch, side, under in sides:
                bodies = label_bodies(trials)
                # the edge may answer more than there are pending trials: it takes them again
                cycle = side != ""
                path = f"{under}{base}/label"
                run(f"{side}label_{shape}", server, path, bodies, cycle=cycle, **watch)
            for server, watch, side, under in sides:
                bodies = stream.learn_bodies()
                run(f"{side}learn_{shape}", server, f"{under}{base}/learn", bodies, **watch)
            if shape == CHALLENGED:  # beside the service's learn just measured
                path = f"{base}-challenged/learn"
                run(f"learn_{shape}_challenged", service, path, stream.learn_bodies(), **on_service)

        def stats_round(k: int) -> None:
            """The statistics read, the service's and its edge's, taking turns going first,
            each beside the same paced learns."""
            r = http.get(f"{base}/stats")
            r.raise_for_status()
            http_edge.put("/edge/stats", content=r.content, headers=JSON).raise_for_status()
            learns = Background(f"{base}/learn", main_stream.learn_bodies(), STATS_LEARNS_PER_S)
            sides = [(service, on_service, ""), (edge, on_edge, "edge_")][:: 1 - 2 * (k % 2)]
            for server, watch, side in sides:
                run(
                    f"{side}stats",
                    server,
                    f"{base}/stats",
                    [b""],
                    method="GET",
                    count=stats_reads,
                    concurrency=STATS_CONCURRENCY,
                    background=learns,
                    **watch,
                )

        base = "/v1/models/bw"
        for k in range(rounds):
            print(f"round {k + 1} of {rounds}", file=sys.stderr)
            run("empty", peer, "/ping", [EMPTY_BODY], **on_peer)
            bodies = main_stream.predict_bodies()
            if k % 2:  # the two predict phases take turns going first
                run_auth(k, bodies)
            done = run(
                "predict", service, f"{base}/predict", bodies, id_prefix=f"r{k}p", **on_service
            )
            if not k % 2:
                run_auth(k, bodies)
            # label the trials just predicted, then more predicted by /predict/batch
            trials = [
                (f"r{k}p{i}", main_stream.labels[i % len(main_stream)]) for i in range(done.issued)
            ]
            more = max(0, pending_needed() - len(trials))
            trials += precreate(http, "bw", main_stream, f"r{k}q", more)
            bodies = label_bodies(trials)
            run("label", service, f"{base}/label", bodies, cycle=False, **on_service)
            run("learn", service, f"{base}/learn", main_stream.learn_bodies(), **on_service)
            stats_round(k)
            batches = streams["bw-batch"][1].batch_bodies(BATCH_ITEMS)
            for name, server, path, watch in [
                ("batch_learn", service, "/v1/models/bw-batch/learn/batch", on_service),
                ("parse_batch", edge, "/parse/learn/batch", on_edge),
                ("append_batch", edge, "/parse/append/learn/batch", on_edge_redis),
            ]:
                # a service's answer holding an item's error counts as a failed request
                reject = b'"error":{' if server is service else None
                run(
                    name,
                    server,
                    path,
                    batches,
                    concurrency=BATCH_CONCURRENCY,
                    reject=reject,
                    **watch,
                )
            for shape, stream in fusion.items():
                fusion_round(k, shape, stream)
            # the feature-count pair back to back, in alternating order
            pair = ["label-10k", "label-1m"][:: 1 if k % 2 == 0 else -1]
            count = pending_needed()
            todo = {m: precreate(http, m, streams[m][1], f"r{k}t", count) for m in pair}
            for m in pair:
                bodies = label_bodies(todo[m])
                run(m, service, f"/v1/models/{m}/label", bodies, cycle=False, **on_service)
    report(run, rounds)


def report(run: Runner, rounds: int) -> None:
    empty = run.best("empty")
    print(
        f"uvicorn, 1 worker, uvloop + httptools; {run.client} client, {CONCURRENCY} connections; "
        f"{run.seconds:g} s timed after {run.warmup:g} s warm-up; rounds: {rounds}, best kept"
    )
    print("CPU figures are microseconds per request (per trial for batches) over the window;")
    print("*_others_cores are the cores every other process on the machine used meanwhile;")
    print("*_cpu_wait the share of the window in which some runnable process waited for a core\n")

    def phase(prefix: str, res: Result, per: int = 1) -> None:
        print(line(f"{prefix}_rps", res.rate, 1 if per > 1 else 0))
        print(line(f"{prefix}_p50_ms", res.p50_ms))
        print(line(f"{prefix}_p99_ms", res.p99_ms))
        for proc in ("server", "redis", "generator"):
            if proc in res.cpu:
                print(line(f"{prefix}_{proc}_cpu_us", res.cpu_us_per_request(proc) / per, 1))
        print(line(f"{prefix}_others_cores", res.cpu["others"] / res.seconds))
        print(line(f"{prefix}_cpu_wait", res.cpu_wait))
        forks = run.forks_in(res)
        if forks is not None:
            print(line(f"{prefix}_redis_forks", forks, 0))

    print("the generator's ceiling: the empty endpoint with each client")
    for client in ("httpx", "raw"):
        phase(f"empty_endpoint_{client}_client", run.best(f"empty_{client}"))
    print()
    print(f"single requests, {CONCURRENCY} clients (model: {N_FEATURES:,} features)")
    phase("empty_endpoint", empty)
    for name in ("predict", "label", "learn"):
        phase(name, run.best(name))
    print()
    batch = run.best("batch_learn")
    print(f"learn/batch: {BATCH_ITEMS:,} items per request, {BATCH_CONCURRENCY} clients")
    phase("batch_learn", batch, per=BATCH_ITEMS)
    print(line("batch_learn_trials_per_s", batch.rate * BATCH_ITEMS, 0))
    print()
    print(f"label on models of {N_FEATURES:,} and {N_FEATURES_LARGE:,} features")
    small, large = run.best("label-10k"), run.best("label-1m")
    phase("label_10k", small)
    phase("label_1m", large)
    print(line("label_latency_1m_vs_10k", large.p50_ms / small.p50_ms))
    print()
    for name in ("learn", "label", "predict"):
        ratio = run.least_p99(name) / run.least_p99("empty")
        print(line(f"{name}_p99_vs_empty_p99", ratio))
    print(line("learn_vs_empty_endpoint", run.best("learn").rate / empty.rate))
    print(line("label_vs_empty_endpoint", run.best("label").rate / empty.rate))
    print(line("predict_vs_empty_endpoint", run.best("predict").rate / empty.rate))
    print()
    print("predict with auth on (a key checked, scoped and rate limited on every request)")
    phase("predict_auth", run.best("predict_auth"))
    print(line("predict_auth_vs_no_auth", run.best("predict_auth").rate / run.best("predict").rate))
    print()
    parse = run.best("parse_batch")
    print("learn/batch against the edge parsing the same batches")
    phase("parse_batch", parse, per=BATCH_ITEMS)
    print(line("batch_learn_vs_parse_only", batch.rate / parse.rate) + spread(run, "batch_learn"))
    append = run.best("append_batch")
    print("learn/batch against the edge parsing the same batches and appending their items")
    phase("append_batch", append, per=BATCH_ITEMS)
    print(
        line("batch_learn_vs_parse_and_append", batch.rate / append.rate)
        + spread(run, "batch_learn")
    )
    print()
    print("fusion: sub-experts' scores for every label as mappings, against the edge")
    worst: dict[str, list[float]] = {}
    for shape, (n, k) in FUSION_SHAPES.items():
        print(f"{n} experts x {k} labels")
        for op in ("predict", "label", "learn"):
            ours, theirs = run.best(f"{op}_{shape}"), run.best(f"edge_{op}_{shape}")
            phase(f"{op}_{shape}", ours)
            phase(f"edge_{op}_{shape}", theirs)
            ratio = ours.rate / theirs.rate
            print(line(f"{op}_vs_edge_{shape}", ratio) + spread(run, f"{op}_{shape}"))
            worst.setdefault(op, []).append(ratio)
            p99s = run.least_p99(f"{op}_{shape}"), run.least_p99(f"edge_{op}_{shape}")
            worst.setdefault(f"{op}_p99", []).append(p99s[0] / p99s[1])
            kept = run.best(f"append_{op}_{shape}")
            phase(f"append_{op}_{shape}", kept)
            print(line(f"append_vs_edge_{op}_{shape}", kept.rate / theirs.rate))
            print(line(f"{op}_vs_append_{shape}", ours.rate / kept.rate))
        untracked = run.best(f"untracked_predict_{shape}")
        phase(f"untracked_predict_{shape}", untracked)
        ratio = untracked.rate / run.best(f"edge_predict_{shape}").rate
        print(line(f"untracked_predict_vs_edge_{shape}", ratio))
        worst.setdefault("untracked_predict", []).append(ratio)
    print()
    ours, theirs = run.best("stats"), run.best("edge_stats")
    print(
        f"the statistics read, {STATS_CONCURRENCY} clients, {ours.requests:,} reads each, "
        f"beside {STATS_LEARNS_PER_S:,.0f} learns/s sent to the same server (its CPU per read "
        "includes theirs)"
    )
    phase("stats", ours)
    phase("edge_stats", theirs)
    print(line("stats_background_learns_per_s", ours.background_rate, 0))
    print(line("edge_stats_background_learns_per_s", theirs.background_rate, 0))
    ratio = run.least_p99("stats") / run.least_p99("edge_stats")
    print(line("stats_p99_vs_edge_p99", ratio) + spread(run, "stats", "p99_ms"))
    print()
    print(f"learn on the {CHALLENGED} fusion model with a shadow challenger of its own spec")
    challenged = run.best(f"learn_{CHALLENGED}_challenged")
    phase(f"learn_{CHALLENGED}_challenged", challenged)
    cost = run.best(f"learn_{CHALLENGED}").rate / challenged.rate - 1
    print(line("challenger_cost_vs_none", cost) + spread(run, f"learn_{CHALLENGED}_challenged"))
    print()
    print("a prediction that stores nothing (information), the worse shape")
    print(line("untracked_predict_vs_edge", min(worst["untracked_predict"])))
    print()
    print("the headline: the worse shape of each")
    for op in ("learn", "label", "predict"):
        print(line(f"{op}_p99_vs_edge_p99", max(worst[f"{op}_p99"])))
    print(line("learn_vs_edge", min(worst["learn"])))
    print(line("label_vs_edge", min(worst["label"])))
    print(line("predict_vs_edge", min(worst["predict"])))


def spread(run: Runner, name: str, figure: str = "rate") -> str:
    """How far the rounds' ``figure`` (a :class:`Result` attribute) spread, as a share of
    the largest."""
    values = [getattr(r, figure) for r in run.results[name]]
    if len(values) < 2:
        return ""
    return f" [rounds spread {(max(values) - min(values)) / max(values):.0%}]"


if __name__ == "__main__":
    with recorded("service", information=["untracked_predict_vs_edge", "append_vs_edge_*"]):
        main()
