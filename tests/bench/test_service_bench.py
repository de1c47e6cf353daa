"""The service benchmark runs end to end and prints every figure, the headline last, and
takes each figure from its rounds as it says.

Of a run only the output format is asserted (each figure a finite number, positive but
for CPU times); the figures themselves are measurements, never test conditions.
"""

import asyncio
import contextlib
import math
import multiprocessing
import re
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import SimpleNamespace

from _run import BENCH_DIR, run_bench

sys.path.insert(0, str(BENCH_DIR))
from _service_load import Result
from service import Runner

PHASE = ("rps", "p50_ms", "p99_ms", "generator_cpu_us")
SERVED = (*PHASE, "server_cpu_us", "redis_cpu_us")
EXPECTED = [
    *(f"empty_endpoint_{c}_client_{f}" for c in ("httpx", "raw") for f in PHASE),
    *(f"empty_endpoint_{f}" for f in PHASE),
    *(f"{p}_{f}" for p in ("predict", "label", "learn", "batch_learn") for f in SERVED),
    *(f"label_{n}_{f}" for n in ("10k", "1m") for f in SERVED),
    *(f"predict_auth_{f}" for f in SERVED),
    "predict_auth_vs_no_auth",
    *(f"parse_batch_{f}" for f in ("rps", "p50_ms", "p99_ms", "server_cpu_us")),
    "batch_learn_vs_parse_only",
    *(f"append_batch_{f}" for f in SERVED),
    "batch_learn_vs_parse_and_append",
    *(f"stats_{f}" for f in SERVED),
    *(f"edge_stats_{f}" for f in (*PHASE, "server_cpu_us")),
    "stats_background_learns_per_s",
    "edge_stats_background_learns_per_s",
    "stats_p99_vs_edge_p99",
    *(
        f"{side}{op}_{shape}_{f}"
        for side in ("", "edge_", "append_")
        for op in ("predict", "label", "learn")
        for shape in ("6x10", "25x5")
        for f in (*PHASE, "server_cpu_us")
    ),
    *(f"untracked_predict_{shape}_{f}" for shape in ("6x10", "25x5") for f in SERVED),
    *(f"untracked_predict_vs_edge{shape}" for shape in ("_6x10", "_25x5", "")),
    *(
        f"{op}_{shape}_redis_cpu_us"
        for op in ("append_predict", "append_label", "append_learn")
        for shape in ("6x10", "25x5")
    ),
    *(
        name
        for op in ("predict", "label", "learn")
        for shape in ("6x10", "25x5")
        for name in (f"append_vs_edge_{op}_{shape}", f"{op}_vs_append_{shape}")
    ),
    *(
        f"{op}_vs_edge_{shape}"
        for op in ("predict", "label", "learn")
        for shape in ("6x10", "25x5")
    ),
    *(f"{op}_p99_vs_edge_p99" for op in ("predict", "label", "learn")),
    "predict_vs_edge",
    "label_vs_edge",
    "learn_vs_edge",
    "batch_learn_trials_per_s",
    "label_latency_1m_vs_10k",
    "predict_p99_vs_empty_p99",
    "label_p99_vs_empty_p99",
    "learn_p99_vs_empty_p99",
    "predict_vs_empty_endpoint",
    "label_vs_empty_endpoint",
    "learn_vs_empty_endpoint",
]
# the edge keeping each trial and the prediction that stores nothing are information:
# their ratios carry no target
TARGETED = [
    name
    for name in EXPECTED
    if "_vs_" in name and "append_" not in name and not name.startswith("untracked_")
]
TARGETED += ["batch_learn_trials_per_s"]
UNTARGETED = [name for name in EXPECTED if "_vs_" in name and name not in TARGETED]
# the service's phases, which watch Redis: each says how often Redis forked meanwhile
WATCHED = [
    *(name.removesuffix("_redis_cpu_us") for name in EXPECTED if name.endswith("_redis_cpu_us")),
    *(f"{op}_{shape}" for op in ("predict", "label", "learn") for shape in ("6x10", "25x5")),
]


def test_quick_run_prints_every_figure_and_the_headline_last():
    out = run_bench("service.py", "--quick")
    figures = {}
    for line in out.splitlines():
        m = re.match(r"(\w+): (\S+)", line)
        if m and m[1] in EXPECTED:
            figures[m[1]] = (float(m[2]), line)
    for name in EXPECTED:
        assert name in figures, f"{name} missing from:\n{out}"
        value, line = figures[name]
        # CPU times come from /proc in clock ticks: a short window may see none
        assert math.isfinite(value) and (value > 0 or "_cpu_" in name), line
    for name in TARGETED:
        assert "(target " in figures[name][1], figures[name][1]
    for name in UNTARGETED:
        assert "(target " not in figures[name][1], figures[name][1]
    # each phase says how long some process waited for a core (unknown without PSI)
    phases = re.findall(r"^(\w+)_others_cores: ", out, re.M)
    waits = dict(re.findall(r"^(\w+)_cpu_wait: (\S+)$", out, re.M))
    assert phases and sorted(waits) == sorted(phases)
    psi = Path("/proc/pressure/cpu").exists()
    for phase, wait in waits.items():
        assert (0 <= float(wait) <= 1) if psi else wait == "nan", (phase, wait)
    for prefix in WATCHED:
        assert re.search(rf"^{prefix}_redis_forks: \d+$", out, re.M), prefix
    assert not re.search(r"^(edge_|parse_batch|empty_)\w*_redis_forks", out, re.M)
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"predict_vs_edge: \d+\.\d\d \(target >= 0\.7: \w+\)", last)


def result(rate: float, p99_ms: float) -> Result:
    return Result(
        requests=int(rate),
        seconds=1.0,
        p50_ms=p99_ms / 2,
        p99_ms=p99_ms,
        issued=int(rate),
        exhausted=False,
        errors=0,
        first_error="",
        cpu={},
    )


def test_a_rate_is_its_best_round_and_a_p99_its_lowest_apart_from_it():
    run = Runner(pool=None, warmup=0.0, seconds=1.0, patience=0.0)  # type: ignore[arg-type]
    run.results["edge"] = [result(900, 4.0), result(1000, 6.0), result(950, 5.0)]
    assert run.best("edge").rate == 1000
    # the tail of the round with the best rate is not the side's least disturbed one
    assert run.least_p99("edge") == 4.0


class SlowServer:
    """A keep-alive HTTP/1.1 server on a thread of its own that answers each request
    ``{}`` after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.loop = asyncio.new_event_loop()
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        self.started.wait(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self.started.set()
        self.loop.run_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length: *(\d+)", head)
                await reader.readexactly(int(length[1]) if length else 0)
                await asyncio.sleep(self.delay)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
                await writer.drain()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def test_a_window_that_completes_no_request_is_run_again_longer():
    """Answers slower than the window leave it empty: the phase is run again, twice as
    long each time, until its window completes some, and gives a rate."""
    slow = SlowServer(0.25)
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            run = Runner(pool, warmup=0.0, seconds=0.1, patience=0.0)
            got = run("slow", SimpleNamespace(port=slow.port), "/", [b"{}"], concurrency=2)  # type: ignore[arg-type]
    finally:
        slow.close()
    assert got.requests > 0 and got.rate > 0
    assert got.seconds > 0.3  # 0.1 and 0.2 s complete no answer of 0.25 s: 0.4 does
    assert run.results["slow"] == [got]
