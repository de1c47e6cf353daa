"""A backtest's replay of a long log, batched against one by one, in the same run.

Two models' logs are written into a private Redis (``storage.server.EmbeddedRedis``) as
the service keeps them, one learned trial per entry: a fusion stream (the service
benchmark's 6 classifiers x 10 labels, scores as mappings, a Committee model) and a sparse
attribute stream (its 20 of 10,000 features, a Balanced Winnow model). Each is replayed
as a backtest replays it (``app.service.replay.Replay`` fed chunks read from Redis, the
model beside three candidates): the fusion log through Committee, Weighted Majority,
Fusion and Multi-class Winnow; the sparse one through Winnow, the Perceptron and ALMA.
Each replay runs once as backtests replayed before (``batch=False``: the log read by
``read_log``, every entry decoded and through every learner one by one) and once as they
replay now (the log read by ``read_log_fields``, each chunk's entries read together in
one compiled pass into one batch, each learner taking the runs between the points where
something else must happen in one compiled call); they must count the same.

Figures, per stream: ``<stream>_python_replay_trials_per_second`` and
``<stream>_backtest_trials_per_second`` (log entries times learners, per second, best of
the rounds), and ``<stream>_backtest_vs_python_replay``; last, the headline
``backtest_vs_python_replay``, the lower of the two ratios (target >= 5).

Run as ``python bench/backtest.py [--trials N] [--rounds R] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from _results import recorded, target_line

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service import FUSION_SHAPES, N_FEATURES, Stream, fusion_spec, model_spec

from app.service.backtests import CHUNK
from app.service.live_model import LiveModel
from app.service.replay import Replay, Run
from storage.client import close, connect
from storage.codec import encode_instance
from storage.repository import ModelStore
from storage.server import EmbeddedRedis

TARGETS = {"backtest_vs_python_replay": (">=", 5.0)}
FUSION_SHAPE = "6x10"
CANDIDATES = {
    "fusion": [
        {"kind": "committee", "alpha": 2.0},
        {"kind": "weighted-majority", "beta": 0.5},
        {"kind": "fusion"},
        {"kind": "multiclass-winnow", "alpha": 1.3},
    ],
    "sparse": [
        {"kind": "winnow", "alpha": 1.5},
        {"kind": "perceptron"},
        {"kind": "alma"},
    ],
}


def _config(stream: str) -> dict[str, Any]:
    if stream == "fusion":
        spec = fusion_spec("m", *FUSION_SHAPES[FUSION_SHAPE])
    else:
        spec = model_spec("m", N_FEATURES)
    return {"label_ttl": 60.0, **{k: v for k, v in spec.items() if k != "name"}}


def _stream(stream: str, trials: int) -> Stream:
    if stream == "fusion":
        return Stream.fusion(trials, *FUSION_SHAPES[FUSION_SHAPE], seed=1)
    return Stream.sparse(trials, N_FEATURES, seed=1)


async def _write_log(store: ModelStore, name: str, config: dict[str, Any], stream: Stream) -> None:
    """The stream as the model's log: one learned trial per entry, as the service keeps it."""
    model = LiveModel(name, "1", config)
    key = store.keys(name).log
    pipe = store.client.pipeline(transaction=False)
    for seq, (body, label) in enumerate(zip(stream.instances, stream.labels, strict=True), 1):
        x = encode_instance(model.encode(orjson.loads(body)))
        y = model.labels.index(label)
        pipe.xadd(key, {b"k": b"n", b"x": x, b"y": b"%d" % y, b"w": b"1"}, id=f"{seq}-0")
        if seq % 2_000 == 0:
            await pipe.execute()
    await pipe.execute()


async def _replay(
    store: ModelStore, name: str, config: dict[str, Any], specs: list[dict[str, Any]], to: int,
    batch: bool,
) -> tuple[float, list[Any]]:  # fmt: skip
    """Seconds to replay the log from Redis as a backtest does, and what it counted."""
    runs = [Run(config["learner"], LiveModel(name, "1", config), served=True)]
    runs += [Run(s, LiveModel(name, "1", {**config, "learner": s})) for s in specs]
    replay = Replay(runs, 0, to, 100, batch=batch)
    start = time.perf_counter()
    while replay.read < to:
        if batch:  # as the backtest reads (app.service.backtests)
            replay.take(await store.read_log_fields(name, replay.read, CHUNK, upto=to), True)
        else:  # as it read before
            replay.take(await store.read_log(name, replay.read, CHUNK, upto=to))
        assert replay.advance(replay.read >= to) is None
    seconds = time.perf_counter() - start
    return seconds, [(r.result(), r.model.learner.export_state()) for r in runs]


async def _bench(stream: str, trials: int, rounds: int, store: ModelStore) -> float:
    name = f"{stream}-{uuid.uuid4().hex[:6]}"
    config = _config(stream)
    await _write_log(store, name, config, _stream(stream, trials))
    specs = CANDIDATES[stream]
    learners = len(specs) + 1
    best: dict[bool, float] = {}
    counted: dict[bool, list[Any]] = {}
    for r in range(rounds):
        for batch in (False, True) if r % 2 == 0 else (True, False):
            seconds, counted[batch] = await _replay(store, name, config, specs, trials, batch)
            best[batch] = min(best.get(batch, seconds), seconds)
    assert counted[True] == counted[False], "the batched replay counted otherwise"
    slow, fast = (trials * learners / best[b] for b in (False, True))
    print(f"{stream}_python_replay_trials_per_second: {slow:,.0f}")
    print(f"{stream}_backtest_trials_per_second: {fast:,.0f}")
    ratio = fast / slow
    print(f"{stream}_backtest_vs_python_replay: {ratio:.2f}")
    return ratio


async def _main(trials: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, EmbeddedRedis(Path(tmp) / "redis") as redis:
        clients = connect(redis.url)
        store = ModelStore(clients, f"b-{uuid.uuid4().hex[:8]}")
        try:
            ratios = [await _bench(s, trials, rounds, store) for s in ("fusion", "sparse")]
        finally:
            await close(clients)
    print(target_line("backtest_vs_python_replay", min(ratios), TARGETS))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=50_000, help="log entries per stream")
    parser.add_argument("--rounds", type=int, default=3, help="replays of each side")
    parser.add_argument("--quick", action="store_true", help="5,000 entries, one round")
    args = parser.parse_args(argv)
    trials, rounds = (5_000, 1) if args.quick else (args.trials, args.rounds)
    asyncio.run(_main(trials, rounds))


if __name__ == "__main__":
    with recorded("backtest", information=["*_per_second", "*_vs_*"], targets=TARGETS):
        main()
