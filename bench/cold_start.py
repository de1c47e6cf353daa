"""A fresh service's cold start: time to ready, then the first trial of every learner kind.

``committee serve`` starts (one worker, its private Redis in a temporary directory) with a
numba cache of its own, empty, as a new container or a fresh install has it, so the
kernel warm-up compiles everything. Measured:

* seconds until ``/healthz`` answers and until ``/readyz`` answers 200, with the slowest
  ``/healthz`` round trip while the service warmed up (its event loop must keep answering);
* after ready, the first ``learn`` of a new model of every kind in ``models.registry``,
  each beside its peer measured in the same process: the median ``/healthz`` round trip.

The target is every kind's first trial within 1 s of ready (printed, never asserted).
``--quick`` reuses this user's numba cache instead of an empty one (so it measures the
warm-up loading the kernels, not compiling them), as the test of this benchmark does.

Run as ``python bench/cold_start.py [--quick]``. Figures are ``name: value`` lines; the
last line is ``slowest_first_trial_seconds: <s> (<kind>, ...)``.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from _results import recorded

from models.registry import KINDS

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 1.0
ATTRIBUTES = {"attributes": {"n_features": 20, "constant_attribute": True}}
EXPERTS = {"experts": {"expert_names": [f"e{i}" for i in range(8)], "threshold_experts": True}}
BINARY, MULTI = ["spam", "ham"], ["a", "b", "c", "d"]
PERCEPTRON = {"kind": "perceptron"}
SUBEXPERT = {"kind": "subexpert", "learner": {"kind": "balanced-winnow"}}
#: One model per kind: its learner spec, and whether it reads attributes (else experts).
MODELS: dict[str, tuple[dict[str, Any], bool]] = {
    "winnow": ({"kind": "winnow"}, True),
    "balanced-winnow": ({"kind": "balanced-winnow", "alpha": 1.5}, True),
    "perceptron": (PERCEPTRON, True),
    "alma": ({"kind": "alma", "p": 3}, True),
    "committee": ({"kind": "committee", "alpha": 1.2}, False),
    "multiclass-winnow": ({"kind": "multiclass-winnow"}, False),
    "weighted-majority": ({"kind": "weighted-majority"}, False),
    "subexpert": (SUBEXPERT, False),
    "recycling": ({"kind": "recycling", "learner": SUBEXPERT}, False),
    "averaging": ({"kind": "averaging", "learner": {"kind": "balanced-winnow"}}, True),
    "v-combine": ({"kind": "v-combine", "learners": [{"kind": "committee"}, SUBEXPERT]}, False),
    "ecoc": ({"kind": "ecoc", "learner": PERCEPTRON}, True),
    "bagging": ({"kind": "bagging", "learner": PERCEPTRON}, True),
    "boosting": ({"kind": "boosting", "learner": {"kind": "committee"}}, False),
    "vr-combine": ({"kind": "vr-combine"}, False),
    "fusion": ({"kind": "fusion"}, False),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def round_trip(http: httpx.Client, path: str) -> float:
    start = time.perf_counter()
    http.get(path).raise_for_status()
    return time.perf_counter() - start


def wait_ready(http: httpx.Client, process: subprocess.Popen[bytes], log: Path) -> dict[str, float]:
    """Poll /healthz and /readyz from the start: the times to each, and the /healthz round
    trips while the service warmed up (median, 99th percentile, slowest)."""
    start, listening, trips = time.perf_counter(), 0.0, []
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"committee serve exited:\n{log.read_text()[-3000:]}")
        try:
            took = round_trip(http, "/healthz")
        except httpx.TransportError:
            time.sleep(0.05)
            continue
        listening = listening or time.perf_counter() - start
        trips.append(took)
        if http.get("/readyz").status_code == 200:
            ready, n = time.perf_counter() - start, len(trips)
            trips.sort()
            median, p99, slowest = trips[n // 2], trips[int(0.99 * (n - 1))], trips[-1]
            return {"listening": listening, "ready": ready, "median": median, "p99": p99,
                    "slowest": slowest, "polls": n}  # fmt: skip
        time.sleep(0.1)


def first_trials(http: httpx.Client, kinds: Sequence[str]) -> dict[str, float]:
    """Seconds of the first learn of a new model of each kind (creating it not counted)."""
    out = {}
    for kind in kinds:
        spec, attributes = MODELS[kind]
        labels = BINARY if attributes and kind != "ecoc" else MULTI
        model = {"name": f"first-{kind}", "labels": labels, "learner": spec}
        model["input"] = ATTRIBUTES if attributes else EXPERTS
        http.post("/v1/models", json=model).raise_for_status()
        if attributes:
            instance: dict[str, Any] = {"features": {"3": 1.0, "11": 0.5}}
        else:
            instance = {"experts": {"e0": labels[1], "e1": labels[0], "e5": labels[1]}}
        body = {"instance": instance, "label": labels[1]}
        start = time.perf_counter()
        http.post(f"/v1/models/first-{kind}/learn", json=body).raise_for_status()
        out[kind] = time.perf_counter() - start
    return out


def verdict(seconds: float) -> str:
    return f"target <= {TARGET_SECONDS:g} s: {'met' if seconds <= TARGET_SECONDS else 'MISSED'}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="reuse this user's numba cache")
    args = parser.parse_args(argv)
    kinds = [k for k in KINDS if k in MODELS]
    with tempfile.TemporaryDirectory(prefix="cold-start-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("COMMITTEE_")}
        env["COMMITTEE_MAX_LEARNERS"] = "4096"  # budgets are not what this measures
        if not args.quick:
            env["NUMBA_CACHE_DIR"] = str(Path(tmp) / "numba")  # empty: compile everything
        port, log = free_port(), Path(tmp) / "serve.log"
        cmd = [sys.executable, "-m", "app.cli.main", "serve", "--port", str(port), "--data-dir"]
        cmd += [str(Path(tmp) / "redis"), "--log-level", "warning"]
        with open(log, "wb") as out:
            process = subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60.0) as http:
                start = wait_ready(http, process, log)
                peer = statistics.median(round_trip(http, "/healthz") for _ in range(50))
                firsts = first_trials(http, kinds)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)
    cache = "this user's numba cache" if args.quick else "an empty numba cache"
    print(f"cold start of committee serve (1 worker, {cache}), {len(kinds)} learner kinds")
    print(f"listening_seconds: {start['listening']:.2f}")
    print(f"ready_seconds: {start['ready']:.2f}")
    polls = f"{start['polls']:.0f} polls"
    for what in ("median", "p99", "slowest"):
        print(f"healthz_while_warming_{what}_ms: {start[what] * 1000:.1f} ({polls})")
    print(f"healthz_round_trip_ms: {peer * 1000:.2f} (the peer: same process, after ready)")
    print(f"  {'kind':<20} {'first trial s':>14} {'x healthz':>10}")
    for kind, seconds in firsts.items():
        print(f"  {kind:<20} {seconds:>14.3f} {seconds / peer:>10.1f}")
    for kind, seconds in firsts.items():
        print(f"first_trial_{kind.replace('-', '_')}_seconds: {seconds:.3f} ({verdict(seconds)})")
    kind = max(firsts, key=firsts.__getitem__)
    s = firsts[kind]
    print(f"slowest_first_trial_seconds: {s:.3f} ({kind}, {s / peer:.0f}x healthz; {verdict(s)})")


if __name__ == "__main__":
    with recorded("cold_start", information=["ready_seconds", "listening_seconds"]):
        main()
