"""The service on a Redis Cluster against the same service on one Redis node, same run.

Two topologies run side by side from Debian's ``redis-server``, both with an append-only
file synced every second and every write replicated once: one node with its replica, and
a cluster of 3 primaries each with a replica.
Each gets two service processes (uvicorn, one worker each, uvloop and httptools: two
"hosts") and the same 64 fusion models (Committee over 6 sub-experts posting scores for
10 labels as mappings, the digits fusion shape of ``bench/service.py``). One load
generator, in a process of its own, drives ``learn`` (one whole trial per request) from
32 closed-loop keep-alive clients, half on each service process, every request to the
next of the 64 models in turn. On the cluster the model names fall on all three
primaries by their slot.

The topologies take turns over ``--rounds`` rounds (so a burst of load from elsewhere
hits both alike); the best round of each is kept, and how far the rounds spread is
printed. Figures, each over ``--seconds`` after a warm-up:

* trials/s and p50 / p99 latency on each topology, and ``cluster_vs_single_node``, the
  cluster's throughput over the single node's (the last line);
* ``redis_us_per_trial``: the CPU microseconds the Redis primaries spent per trial on
  the cluster (all primaries' CPU over all trials: what one trial costs the shard that
  holds its model); the single node's figure and the replicas' beside it. A shard's
  primary on one core serves about ``1e6 / redis_us_per_trial`` trials/s, which sizes a
  cluster (``docs/scaling.rst`` does the arithmetic).

On a 2-core machine the service processes, the generator and Redis share the cores, so
the service processes bound both figures; absolute figures move 2-3x between machines and
days, the ratio is the result. Run: ``python bench/cluster.py [--quick] [--seconds S]
[--rounds R]``.
"""

from __future__ import annotations

import multiprocessing
import sys
import tempfile
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
from _results import recorded
from _service_load import Plan, Result
from _service_load import run as run_plan
from service import Server, Stream, fusion_spec, phase_options, post, uvicorn
from service import line as service_line

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from harness.redis_cluster import LocalSentinel, RedisCluster

MODELS = 64
EXPERTS, LABELS = 6, 10
SERVERS = 2
CONCURRENCY = 32
TARGETS = {"cluster_vs_single_node": (">=", 0.8)}


@dataclass
class Topology:
    """One Redis topology, its service processes and the Redis processes to watch."""

    name: str
    servers: list[Server]
    primaries: dict[str, int]  # name -> pid
    replicas: dict[str, int]

    @property
    def watch(self) -> dict[str, int]:
        servers = {f"server{i}": s.pid for i, s in enumerate(self.servers)}
        return servers | self.primaries | self.replicas

    def redis_us(self, res: Result, which: dict[str, int]) -> float:
        """CPU microseconds per trial of the Redis processes ``which``."""
        return sum(res.cpu[name] for name in which) / res.requests * 1e6 if which else 0.0

    def server_us(self, res: Result) -> float:
        spent = sum(res.cpu[f"server{i}"] for i in range(len(self.servers)))
        return spent / res.requests * 1e6


def start_topology(
    stack: ExitStack, name: str, url: str, tmp: Path, stream: Stream
) -> list[Server]:
    """Two service processes on ``url`` and the 64 models, created and primed through
    both (each process loads every model and compiles its kernels before the timing)."""
    env = {
        "COMMITTEE_REDIS_URL": url,
        "COMMITTEE_KEY_PREFIX": "bench",
        "COMMITTEE_LOG_LEVEL": "warning",
    }
    servers = [
        stack.enter_context(
            uvicorn(
                f"{name}-{i}",
                ["app.http.main:create_app", "--factory"],
                env,
                tmp,
                lambda h: h.get("/readyz").status_code == 200,
                timeout=180.0,
            )
        )
        for i in range(SERVERS)
    ]
    bodies = stream.learn_bodies()
    with httpx.Client(base_url=servers[0].url, timeout=120.0) as http:
        for m in range(MODELS):
            post(http, "/v1/models", fusion_spec(f"m{m}", EXPERTS, LABELS))
    for server in servers:
        with httpx.Client(base_url=server.url, timeout=120.0) as http:
            for m in range(MODELS):
                post(http, f"/v1/models/m{m}/learn", bodies[m])
    return servers


def line(name: str, value: float, digits: int = 2) -> str:
    return service_line(name, value, digits, TARGETS)


def spread(results: list[Result]) -> str:
    rates = [r.rate for r in results]
    if len(rates) < 2:
        return ""
    return f" [rounds spread {(max(rates) - min(rates)) / max(rates):.0%}]"


def main(argv: list[str] | None = None) -> None:
    args = phase_options(__doc__.split("\n\n")[0], argv, 4.0)
    seconds, warmup, rounds = args.seconds, args.warmup, args.rounds
    stream = Stream.fusion(4_000, EXPERTS, LABELS, args.seed)
    paths = [f"/v1/models/m{m}/learn" for m in range(MODELS)]

    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cluster-bench-")))
        node = stack.enter_context(LocalSentinel(tmp / "one", sentinels=0))
        cluster = stack.enter_context(RedisCluster(tmp / "cluster"))
        primaries = cluster.primaries()
        by_primary = Counter(cluster.primary_of_key(f"bench:{{m{m}}}") for m in range(MODELS))
        topologies = [
            Topology(
                "single_node",
                start_topology(stack, "one", f"redis://127.0.0.1:{node.primary}/0", tmp, stream),
                {"redis": node.processes[node.primary].pid},
                {"replica": node.processes[node.replica].pid},
            ),
            Topology(
                "cluster",
                start_topology(stack, "cluster", cluster.seed_url, tmp, stream),
                {f"primary{i}": cluster.processes[p].pid for i, p in enumerate(primaries)},
                {
                    f"replica{i}": cluster.processes[p].pid
                    for i, p in enumerate(sorted(set(cluster.ports) - set(primaries)))
                },
            ),
        ]
        pool = stack.enter_context(
            ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        )
        results: dict[str, list[Result]] = {t.name: [] for t in topologies}
        for r in range(rounds):
            # the two take turns going first
            for topology in topologies if r % 2 == 0 else topologies[::-1]:
                plan = Plan(
                    port=topology.servers[0].port,
                    path=paths[0],
                    bodies=stream.learn_bodies(),
                    concurrency=CONCURRENCY,
                    warmup=warmup,
                    seconds=seconds,
                    ports=[s.port for s in topology.servers],
                    paths=paths,
                    watch=topology.watch,
                )
                res = pool.submit(run_plan, plan).result()
                if res.errors or not res.requests:
                    raise RuntimeError(
                        f"{topology.name}: {res.requests} trials, {res.errors} failed, "
                        f"first {res.first_error}"
                    )
                results[topology.name].append(res)
                print(
                    f"  round {r + 1} {topology.name}: {res.rate:,.0f} trials/s, "
                    f"p99 {res.p99_ms:.2f} ms",
                    file=sys.stderr,
                    flush=True,
                )

    print(
        f"{MODELS} Committee models ({EXPERTS} experts x {LABELS} labels, score mappings), "
        f"learn from {CONCURRENCY} clients over {SERVERS} service processes of one worker; "
        f"{seconds:g} s timed after {warmup:g} s warm-up; rounds: {rounds}, best kept"
    )
    print(
        "models per cluster primary: "
        + ", ".join(f"{by_primary[p]} on :{p}" for p in primaries)
        + "\n"
    )
    best = {name: max(rs, key=lambda r: r.rate) for name, rs in results.items()}
    for topology in topologies:
        res = best[topology.name]
        print(line(f"{topology.name}_trials_per_s", res.rate, 0) + spread(results[topology.name]))
        print(line(f"{topology.name}_p50_ms", res.p50_ms))
        print(line(f"{topology.name}_p99_ms", res.p99_ms))
        print(line(f"{topology.name}_server_us_per_trial", topology.server_us(res), 1))
        print(line(f"{topology.name}_others_cores", res.cpu["others"] / res.seconds))
    one, many = topologies
    print(line("redis_us_per_trial_single_node", one.redis_us(best[one.name], one.primaries), 1))
    print(
        line(
            "redis_replica_us_per_trial_single_node", one.redis_us(best[one.name], one.replicas), 1
        )
    )
    print(
        line(
            "redis_replicas_us_per_trial_cluster", many.redis_us(best[many.name], many.replicas), 1
        )
    )
    print(line("redis_us_per_trial", many.redis_us(best[many.name], many.primaries), 1))
    print(line("cluster_vs_single_node", best[many.name].rate / best[one.name].rate))


if __name__ == "__main__":
    with recorded("cluster", information=["redis_us_per_trial*", "*_trials_per_s"]):
        main()
