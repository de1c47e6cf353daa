"""Where a fusion trial call's server CPU goes: the service beside its edge, sampled inside.

The service (``app.http.main:create_app`` over a private append-only Redis) and the edge peer of
``bench/service.py`` (``bench/_service_edge.py``: the service's own middleware and a
dispatcher that parses each body with orjson and answers) each run under uvicorn with a
CPU-time stack sampler installed (``bench/_sampled.py``, ``bench/_sampler.py``). The load
generator of ``bench/service.py`` drives ``predict``, ``label`` and ``learn`` on a
Committee model whose 6 sub-experts post a score for each of 10 labels as a mapping (the
digits fusion), 32 clients; each server samples its stack over the generator's timed
window (started and stopped from here by the clock, so within a fraction of a second of
it, all under the same load), and the CPU it spent in that window, read from ``/proc``,
is split by the samples into what the frames do:

* ``http``: uvicorn, Starlette, FastAPI and the middleware both run (request metrics,
  limits, the guard, the trial calls' fast path or the edge's dispatcher), with the
  answer's JSON and its writing; the edge's parse of the body is here too (charged to
  the dispatcher's next call: see ``bench/_sampler.py``);
* ``read``: the service reading the body (``app/http/bodies.py``, the handlers' reader);
* ``call``: the handlers and the trial logic around the model (ids, answers, retries);
* ``gather``: gathering a model's concurrent calls into one (``app/service/gather.py``);
* ``encode``: the votes as an instance (``models/inputs``, ``models/core/instance.py``);
* ``stored``: the instance's stored bytes (``storage/codec.py``);
* ``model``: the learner and the model's state in memory (predicting, learning, replay);
* ``keep``: holding predicted instances for their labels (``Kept``);
* ``redis``: the script call, its packing, the reply and the connection;
* ``loop``: the event loop and whatever else.

A sample goes to the innermost frame of its stack that one of these names. Figures are
microseconds of server CPU per call, summed over ``--rounds`` rounds of ``--seconds``
each (the two servers taking turns going first), as ``<op>_<side>_<part>_us: value``
lines after each call's totals (``<op>_<side>_us_per_call``) and the service's CPU over
the edge's (``<op>_cpu_vs_edge``: the ratio ``<op>_vs_edge`` of ``bench/service.py``
approaches while both servers keep their core busy). The last line is
``predict_cpu_vs_edge: <ratio>``.

Run as ``python bench/profile_calls.py [--quick] [--seconds S] [--warmup W] [--rounds R]``
(4 s after 1 s, 3 rounds). ``--quick`` is a smoke run: one round of 0.25 s after 0.15 s,
but the service's ``predict`` runs at least ``QUICK_PREDICT_SECONDS``, and again until it
has ``QUICK_PREDICT_SAMPLES`` samples (in ``QUICK_PREDICT_RUNS`` windows at most): the
sampler takes one sample per tick of the CPU the server gets (4 ms on most kernels), so
fewer a second on a busy or slow machine, and each part a fusion predict cannot run without
(reading, encoding, the model, Redis) takes a few percent of its CPU.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx
from _results import recorded
from _sampler import START, STOP
from _service_load import Plan, Result
from _service_load import run as run_plan
from service import (
    CONCURRENCY,
    Server,
    Stream,
    create_and_prime,
    edge_server,
    fusion_spec,
    label_bodies,
    phase_options,
    precreate,
    quiet,
    service_server,
)

from storage.server import EmbeddedRedis

N_EXPERTS, N_LABELS = 6, 10
OPS = ("predict", "label", "learn")
SIDES = ("service", "edge")
PARTS = (
    "http",
    "read",
    "call",
    "gather",
    "encode",
    "stored",
    "model",
    "keep",
    "redis",
    "loop",
)
_KEPT = frozenset(
    {"put", "put_many", "take", "_enter", "_release", "_views", "_owners", "_nbytes", "_own"}
)
_ENCODE = frozenset({"encode", "encode_each", "_active"})
# (part, path prefix, functions or None for any), tried in order on each frame, innermost
# first; a frame none names (numpy, numba, the standard library) passes to its caller
RULES: tuple[tuple[str, str, frozenset[str] | None], ...] = (
    ("keep", "app/service/live_model.py", _KEPT),
    ("encode", "app/service/live_model.py", _ENCODE),
    ("model", "app/service/live_model.py", None),
    ("read", "app/http/bodies.py", None),
    ("read", "app/http/routers/trials.py", frozenset({"_read", "_read_batch", "_instance"})),
    ("call", "app/http/routers/", None),
    ("call", "app/service/trial_calls.py", None),
    ("gather", "app/service/gather.py", None),
    ("stored", "storage/codec.py", None),
    ("redis", "storage/", None),
    ("redis", "app/service/replicas.py", None),
    ("redis", "hiredis/", None),
    ("http", "app/", None),
    ("http", "bench/_service_edge.py", None),
    ("encode", "models/inputs/", None),
    ("encode", "models/core/instance.py", None),
    ("model", "models/", None),
    ("loop", "uvicorn/main.py", None),  # the server's loop, below every request
    ("loop", "uvicorn/server.py", None),
    ("http", "uvicorn/", None),
    ("http", "starlette/", None),
    ("http", "fastapi/", None),
    ("http", "prometheus_client/", None),
    ("http", "httptools/", None),
)
QUICK_PREDICT_SECONDS = 1.5  # the service's predict with --quick, at least
QUICK_PREDICT_SAMPLES = 300  # and its samples: a part of 4% then has 12 expected
QUICK_PREDICT_RUNS = 8  # windows at most
_FRAME = re.compile(r"(?P<function>.*) \((?P<path>[^ ]*):(?:\d+|None)\)")


def part_of(stack: str) -> str:
    """The part a sampled stack (outermost frame first, ``;`` between) goes to."""
    for frame in reversed(stack.split(";")):
        got = _FRAME.fullmatch(frame)
        if got is None:
            continue
        function, path = got["function"], got["path"]
        for part, prefix, functions in RULES:
            if path.startswith(prefix) and (functions is None or function in functions):
                return part
    return "loop"


def read_samples(path: Path) -> Counter[str]:
    """The parts' sample counts in the collapsed stacks at ``path``."""
    parts: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        parts[part_of(stack)] += int(count)
    return parts


class Sampled:
    """The samples and CPU of one server across rounds."""

    def __init__(self, server: Server, out: Path) -> None:
        self.server = server
        self.out = out
        self.parts: Counter[str] = Counter()
        self.cpu = 0.0  # seconds, in the windows
        self.requests = 0

    def measure(self, pool: ProcessPoolExecutor, plan: Plan, patience: float) -> Result:
        """Run ``plan`` with sampling on over its window, adding up its samples and CPU."""
        quiet(patience=patience)
        written = Path(f"{self.out}.{self.server.pid}")
        written.unlink(missing_ok=True)
        pid = self.server.pid

        def toggle() -> None:
            time.sleep(plan.warmup)
            os.kill(pid, START)
            time.sleep(plan.seconds)
            os.kill(pid, STOP)

        toggler = threading.Thread(target=toggle)
        toggler.start()
        result = pool.submit(run_plan, plan).result()
        toggler.join()
        for _ in range(100):  # the server writes them between two requests
            if written.exists():
                break
            time.sleep(0.05)
        if result.errors:
            raise RuntimeError(f"{result.errors} requests failed, first {result.first_error}")
        self.parts += read_samples(written)
        self.cpu += result.cpu["server"]
        self.requests += result.requests
        return result

    @property
    def samples(self) -> int:
        """The samples taken in the windows so far."""
        return sum(self.parts.values())

    def us(self, part: str | None = None) -> float:
        """CPU microseconds per call, all or one part's share."""
        total = self.cpu / max(self.requests, 1) * 1e6
        if part is None:
            return total
        return total * self.parts[part] / self.samples if self.samples else 0.0


def main(argv: Sequence[str] | None = None) -> None:
    args = phase_options(__doc__.split("\n\n")[0], argv, 4.0)
    trials = 2_000 if args.quick else 40_000
    stream = Stream.fusion(trials, N_EXPERTS, N_LABELS, args.seed)
    name = "fusion"
    base = f"/v1/models/{name}"
    patience = 0.0 if args.quick else 15.0
    seconds = {(op, side): args.seconds for op in OPS for side in SIDES}
    if args.quick:
        seconds["predict", "service"] = max(args.seconds, QUICK_PREDICT_SECONDS)
    # a label phase's window over the service's predict's, whose trials it labels
    windows = [args.warmup + seconds[op, "service"] for op in ("label", "predict")]
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="profile-")))
        redis = stack.enter_context(EmbeddedRedis(tmp / "redis"))
        out = tmp / "stacks"
        sampled = {"SAMPLER_OUT": str(out)}
        env = {
            "COMMITTEE_REDIS_URL": redis.url,
            "COMMITTEE_KEY_PREFIX": "profile",
            "COMMITTEE_LOG_LEVEL": "warning",
            **sampled,
        }
        service = stack.enter_context(service_server("service", env, tmp, "_sampled"))
        edge = stack.enter_context(
            edge_server({"EDGE_REDIS_URL": redis.url, **sampled}, tmp, "_sampled")
        )
        with httpx.Client(base_url=service.url, timeout=120.0) as http:
            create_and_prime(http, name, 0, stream, fusion_spec(name, N_EXPERTS, N_LABELS))
        pool = stack.enter_context(
            ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        )
        # the generator's process started now, not within the first window's warm-up,
        # which the samplers' timers count from
        pool.submit(int).result()
        servers = {"service": service, "edge": edge}
        got = {(op, side): Sampled(servers[side], out) for op in OPS for side in SIDES}
        for k in range(args.rounds):
            order = SIDES if k % 2 == 0 else SIDES[::-1]
            pending: list[tuple[str, int]] = []
            for op in OPS:
                for side in order:
                    plan = Plan(
                        port=servers[side].port,
                        path=f"{base}/{op}",
                        bodies=[],
                        concurrency=CONCURRENCY,
                        warmup=args.warmup,
                        seconds=seconds[op, side],
                        watch={"server": servers[side].pid},
                    )
                    if op == "predict":
                        plan.bodies = stream.predict_bodies()
                        plan.id_prefix = f"r{k}{side}"
                    elif op == "label":
                        plan.bodies = label_bodies(pending)
                        plan.cycle = side == "edge"  # the edge takes them again
                    else:
                        plan.bodies = stream.learn_bodies()
                    result = got[op, side].measure(pool, plan, patience)
                    if op == "predict" and side == "service":
                        # the trials it left pending (body i's id is the prefix and i);
                        # with --quick, windows again until the samples are enough
                        pending = []
                        runs = 0
                        while runs == 0 or (
                            args.quick
                            and got[op, side].samples < QUICK_PREDICT_SAMPLES
                            and runs < QUICK_PREDICT_RUNS
                        ):
                            if runs:
                                plan.id_prefix = f"r{k}{side}-{runs}-"
                                result = got[op, side].measure(pool, plan, patience)
                            pending += [
                                (f"{plan.id_prefix}{i}", stream.labels[i % len(stream)])
                                for i in range(result.issued)
                            ]
                            runs += 1
                        # and more, up to three times as many as it issued over a window
                        # as long as the label's: a label outruns a predict
                        issued = len(pending)
                        wanted = math.ceil(3 * issued * windows[0] / (runs * windows[1]))
                        more = max(0, wanted - issued)
                        with httpx.Client(base_url=service.url, timeout=120.0) as http:
                            pending += precreate(http, name, stream, f"r{k}p", more)
                    print(
                        f"  round {k} {op} {side}: {result.rate:,.0f} calls/s, "
                        f"{result.cpu_us_per_request('server'):.1f} µs of server CPU each, "
                        f"{got[op, side].samples} samples",
                        file=sys.stderr,
                        flush=True,
                    )
        report(got)


def report(got: dict[tuple[str, str], Sampled]) -> None:
    for op in OPS:
        for side in SIDES:
            s = got[op, side]
            print(f"{op}_{side}_us_per_call: {s.us():.2f}")
            for part in PARTS:
                print(f"{op}_{side}_{part}_us: {s.us(part):.2f}")
    for op in ("label", "learn", "predict"):
        service, edge = got[op, "service"], got[op, "edge"]
        print(f"{op}_cpu_vs_edge: {edge.us() / service.us():.2f}")


if __name__ == "__main__":
    with recorded("profile_calls", information=["*_cpu_vs_edge", "*_us_per_call"]):
        main()
