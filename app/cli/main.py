"""The ``committee`` command line."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.service.warmup import place_worker_cache, warm_worker
from models.inputs.datasets import MajorityProblem
from models.registry import build

# the commands defined in modules of their own, each imported only when it is the one
# run: ``serve`` must set up its workers' metrics before anything imports the metrics
COMMANDS = {
    "experiment": "experiments.cli",
    "serve": "app.cli.serve",
    "keys": "app.cli.keys",
    "export": "app.cli.history",
    "import": "app.cli.history",
    "consume": "app.cli.consume",
}

DEMO_LEARNERS: dict[str, dict[str, Any]] = {
    "committee": {"kind": "committee", "alpha": 1.2},
    "balanced-winnow": {"kind": "subexpert", "learner": {"kind": "balanced-winnow", "alpha": 1.1}},
    "perceptron": {"kind": "subexpert", "learner": {"kind": "perceptron"}},
    "alma(3)": {"kind": "subexpert", "learner": {"kind": "alma", "p": 3.0}},
    "weighted-majority": {"kind": "weighted-majority", "beta": 0.5, "update": "on_mistake"},
    "vr-combine": {"kind": "vr-combine"},
}


def demo(args: argparse.Namespace) -> int:
    """Stream S4's majority problem through several learners and print their mistakes."""
    problem = MajorityProblem(n=20, r=10, k=5, noise=args.noise)
    rng = np.random.default_rng(args.seed)
    xs, ys, _ = problem.sample(args.trials, rng)
    labels = list(range(problem.k))
    learners = {
        name: build(spec, labels=labels, size=problem.n_experts)
        for name, spec in DEMO_LEARNERS.items()
    }
    every = max(1, args.trials // 10)
    print(
        f"majority problem: n={problem.n} r={problem.r} k={problem.k} noise={args.noise}, "
        f"cumulative mistakes"
    )
    print(f"{'trial':>7} " + " ".join(f"{name:>18}" for name in learners))
    for t, (x, y) in enumerate(zip(xs, ys, strict=True), start=1):
        for learner in learners.values():
            learner.learn(x, int(y))
        if t % every == 0 or t == args.trials:
            print(f"{t:>7} " + " ".join(f"{lr.mistakes_:>18}" for lr in learners.values()))
    test_x, test_y, _ = problem.sample(args.test, rng)
    errors = {
        name: float(np.mean([lr.predict(x) != y for x, y in zip(test_x, test_y, strict=True)]))
        for name, lr in learners.items()
    }
    print("final-hypothesis error on fresh instances (optimal = noise rate):")
    print(json.dumps(errors, indent=2))
    return 0


def warm(args: argparse.Namespace) -> int:
    """Compile every kernel a worker runs into numba's on-disk cache; print the time each
    learner kind took."""
    cache = place_worker_cache()
    print(f"numba cache: {cache or 'numba default (beside the sources)'}")
    seconds = warm_worker()
    for kind, s in seconds.items():
        print(f"  {kind:<20} {s:>7.2f} s")
    print(f"  {'total':<20} {sum(seconds.values()):>7.2f} s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="committee", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="stream the majority problem through the learners")
    p.add_argument("--trials", type=int, default=5000)
    p.add_argument("--test", type=int, default=5000)
    p.add_argument("--noise", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=demo)
    p = sub.add_parser("warm", help="compile the learners' kernels into the on-disk cache")
    p.set_defaults(func=warm)
    argv = list(sys.argv[1:] if argv is None else argv)
    named = next((a for a in argv if not a.startswith("-")), "")
    modules = [COMMANDS[named]] if named in COMMANDS else dict.fromkeys(COMMANDS.values())
    for module in modules:
        importlib.import_module(module).add_parser(sub)
    args = parser.parse_args(argv)
    # every command's kernels from the cache `committee warm` fills (keyed on the sources)
    place_worker_cache()
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
