"""What reading and encoding a batch costs per item, each fast path beside the path it
replaces, in the same process.

- Fusion batches (``predict/batch`` bodies of scores as mappings, 6 experts x 10 labels
  and 25 x 5): the body read in one compiled pass (:func:`app.http.bodies.read_batch`, the
  votes then read from its text together) against the parsed path the service takes for
  a body that pass leaves (pydantic, then the vote dicts).
- Sparse features, a ``learn/batch`` body of 1,000 items of the service benchmark's
  stream: read in one compiled pass (the features then read from its text together)
  against the parsed path (``batch_read_vs_parsed_sparse``).
- Hashed features (50 names per instance, 2**18 places): a batch encoded together against
  the same instances encoded one by one.
- Sparse features (the service benchmark's stream: 20 of 10,000 indices, and the
  constant), one instance and a batch of 1,000, encoded together (one compiled pass)
  against each encoded alone by the reference path, which takes any row that pass leaves.

Rounds alternate the two sides; each figure is the best round, with the spread of the
rounds. Run as ``python bench/encode.py``; the last line is the fusion shapes' worse
``batch_read_vs_parsed`` (the parsed path's time over the fast one's).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import orjson
from _results import recorded
from service import FUSION_SHAPES, N_FEATURES, Stream, fusion_spec

from app.http.routers import trials
from models.inputs.space import InputSpace

ITEMS = 100  # items per fusion batch
HASHED = (200, 50, 1 << 18)  # instances per batch, names per instance, places


def _best(
    sides: dict[str, Callable[[], object]], rounds: int, loops: int
) -> dict[str, list[float]]:
    """Seconds per call of each side, one figure per round, the sides taking turns."""
    out: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for r in range(rounds):
        for name in names[:: 1 if r % 2 == 0 else -1]:
            call = sides[name]
            call()
            start = time.perf_counter()
            for _ in range(loops):
                call()
            out[name].append((time.perf_counter() - start) / loops)
    return out


def _spread(times: list[float]) -> str:
    return (
        f" [rounds spread {(max(times) - min(times)) / max(times):.0%}]" if len(times) > 1 else ""
    )


def read_vs_parsed(shape: str, rounds: int, loops: int) -> float:
    """A batch body read in one compiled pass against the parsed path, per item: fusion
    items (a ``predict/batch`` body of ``shape``), or ``"sparse"``, sparse items (a
    ``learn/batch`` body of the service benchmark's stream)."""
    if shape == "sparse":
        count, form, kind = SPARSE_BATCH, "attributes", trials.LEARN_BATCH
        space = InputSpace(
            [0, 1], attributes={"n_features": N_FEATURES, "constant_attribute": True}
        )
        body = Stream.sparse(count, N_FEATURES, 0).batch_bodies(count)[0]
        fields, top = trials._LEARN_FIELDS, trials._BATCH_TOP
    else:
        n, k = FUSION_SHAPES[shape]
        count, form, kind = ITEMS, "experts", trials.PREDICT_BATCH
        spec = fusion_spec("m", n, k)
        space = InputSpace.from_config({"labels": spec["labels"], **spec["input"]})
        docs = [orjson.loads(b) for b in Stream.fusion(count, n, k, 0).predict_bodies()[:count]]
        items = [{"instance": d["instance"], "trial_id": f"t{i}"} for i, d in enumerate(docs)]
        body = orjson.dumps({"items": items})
        fields, top = trials._PREDICT_FIELDS, trials._PREDICT_BATCH_TOP

    def one_pass() -> Sequence[Any]:
        b = trials._read_batch(body, kind, fields, top, count)
        return space.encode_each([i["instance"] for i in b["items"]], form)

    def parsed() -> Sequence[Any]:
        b = kind.read(body)
        return space.encode_each([trials._instance(i["instance"]) for i in b["items"]], form)

    fast, slow = one_pass(), parsed()
    assert len(fast) == len(slow) == count
    for x, y in zip(fast, slow, strict=True):  # the same instances
        assert type(x) is type(y)
        arrays = ("indices", "values") if form == "attributes" else ("expert", "cls", "value")
        assert all(np.array_equal(getattr(x, a), getattr(y, a)) for a in arrays)
    got = _best({"one_pass": one_pass, "parsed": parsed}, rounds, loops)
    for side, times in got.items():
        print(f"{side}_{shape}_us_per_item: {min(times) / count * 1e6:.2f}{_spread(times)}")
    ratio = min(got["parsed"]) / min(got["one_pass"])
    print(f"batch_read_vs_parsed_{shape}: {ratio:.2f}")
    return ratio


def hashed(rounds: int, loops: int) -> None:
    count, per, places = HASHED
    space = InputSpace([0, 1], attributes={"hashing": {"n_features": places, "seed": 1}})
    rng = random.Random(0)
    vocab = [f"token{i}" for i in range(5_000)]
    rows = [{"features": dict.fromkeys(rng.sample(vocab, per), 1.0)} for _ in range(count)]
    got = _best(
        {
            "together": lambda: space.encode_each(rows, "attributes"),
            "one_by_one": lambda: [space.encode(r, "attributes") for r in rows],
        },
        rounds,
        loops,
    )
    for side, times in got.items():
        print(f"hashed_{side}_us_per_instance: {min(times) / count * 1e6:.2f}{_spread(times)}")
    ratio = min(got["one_by_one"]) / min(got["together"])
    print(f"hashed_together_vs_one_by_one: {ratio:.2f}")


SPARSE_BATCH = 1_000  # instances in the sparse batch


def sparse(rounds: int, loops: int) -> None:
    space = InputSpace([0, 1], attributes={"n_features": N_FEATURES, "constant_attribute": True})
    rows = [orjson.loads(x) for x in Stream.sparse(SPARSE_BATCH, N_FEATURES, 0).instances]
    for x, y in zip(space.encode_each(rows, "attributes"), rows, strict=True):
        want = space.encode(y, "attributes")  # the same instances
        assert np.array_equal(x.indices, want.indices) and np.array_equal(x.values, want.values)
    one = rows[:1]
    for what, batch, batch_loops in (("one", one, loops), ("batch", rows, max(1, loops // 50))):
        got = _best(
            {
                "compiled": lambda b=batch: space.encode_each(b, "attributes"),
                "encode": lambda b=batch: [space.encode(r, "attributes") for r in b],
            },
            rounds,
            batch_loops,
        )
        for side, times in got.items():
            per = min(times) / len(batch) * 1e6
            print(f"sparse_{what}_{side}_us_per_instance: {per:.2f}{_spread(times)}")
        print(f"sparse_{what}_vs_encode: {min(got['encode']) / min(got['compiled']):.2f}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few loops, two rounds")
    args = parser.parse_args(argv)
    rounds, loops = (2, 3) if args.quick else (5, 200)
    hashed(rounds, loops)
    sparse(rounds, loops)
    ratios = [read_vs_parsed(shape, rounds, loops) for shape in FUSION_SHAPES]
    read_vs_parsed("sparse", rounds, max(1, loops // 10))
    print(f"batch_read_vs_parsed: {min(ratios):.2f}")


if __name__ == "__main__":
    with recorded("encode", information=["*_vs_*"]):
        main()
