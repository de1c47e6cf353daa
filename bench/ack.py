"""What each ``COMMITTEE_ACK`` mode costs: learns per second through the repository (the
service's storage layer, no HTTP), with ``applied`` as the peer in the same run.

- ``fsync`` against ``applied`` on one private Redis: ``appendfsync always`` (which the
  mode needs before Redis 7.2) against the default ``everysec``;
- ``replicated`` against ``applied`` on a local Redis Cluster of 3 primaries, each with a
  replica (``WAIT 1`` after each write).

``CONCURRENCY`` learns are in flight at once, as a busy worker has them. Absolute figures
move 2-3x between machines and days; the ratios are the result. Run:
``python bench/ack.py [--seconds S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _results import recorded

from models.core.instance import Attributes
from storage.client import close, connect
from storage.codec import encode_instance
from storage.repository import LearnGroup, ModelStore
from storage.server import EmbeddedRedis

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from harness.redis_cluster import RedisCluster

CONCURRENCY = 32
CONFIG = {"labels": ["a", "b"], "input": {"attributes": {"n_features": 64}}}


async def learns_per_second(url: str, ack: str, seconds: float) -> float:
    """Learns on 8 models for ``seconds``, each waiting for its ``ack``."""
    clients = connect(url)
    store = ModelStore(clients, f"b-{uuid.uuid4().hex[:8]}", ack=ack)
    try:
        await store.check_server()
        models = []
        for i in range(8):
            made = await store.create(f"m{i}", CONFIG, n_classes=2, size=64, most=100)
            models.append((f"m{i}", made.incarnation))
        x = encode_instance(Attributes([1, 5, 9], [1.0, 1.0, 1.0]))
        done = 0
        stop = time.perf_counter() + seconds

        async def client(j: int) -> None:
            nonlocal done
            name, inc = models[j % len(models)]
            while time.perf_counter() < stop:
                # a known version far behind: the script appends and returns no entries
                await store.learn(
                    name,
                    inc,
                    0,
                    fold=b"",
                    limit=0,
                    keep_ms=60_000,
                    groups=[LearnGroup([(x, j % 2)])],
                )
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(client(j) for j in range(CONCURRENCY)))
        return done / (time.perf_counter() - start)
    finally:
        await close(clients)


def line(name: str, value: float, digits: int = 2) -> str:
    return f"{name}: {value:.{digits}f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=3.0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="ack-") as d:
        with EmbeddedRedis(Path(d) / "everysec") as r:
            applied = asyncio.run(learns_per_second(r.url, "applied", args.seconds))
        with EmbeddedRedis(Path(d) / "always", appendfsync="always") as r:
            fsync = asyncio.run(learns_per_second(r.url, "fsync", args.seconds))
        with RedisCluster(Path(d) / "cluster") as c:
            cluster_applied = asyncio.run(learns_per_second(c.seed_url, "applied", args.seconds))
            replicated = asyncio.run(learns_per_second(c.seed_url, "replicated", args.seconds))
    print(line("learns_per_s_applied_one_node", applied, 0))
    print(line("learns_per_s_fsync_one_node", fsync, 0))
    print(line("learns_per_s_applied_cluster", cluster_applied, 0))
    print(line("learns_per_s_replicated_cluster", replicated, 0))
    print(line("fsync_vs_applied", fsync / applied))
    print(line("replicated_vs_applied", replicated / cluster_applied))


if __name__ == "__main__":
    with recorded("ack", information=["*"]):
        main()
