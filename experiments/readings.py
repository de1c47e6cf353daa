"""Candidate readings of what S4 leaves unsaid, measured with the Table I protocol.

Each :class:`Reading` changes some parameters of the basic sub-expert algorithms, of
VR-Combine or of the majority problem. :func:`measure` runs the protocol of
:mod:`experiments.runs` with those changes in force and keeps, per noise level, what the
open questions are about: VR-Combine's on-line mistakes and final error, and the best B and
A-B learners' final errors. ``python -m experiments.readings`` prints the table; the
measured figures and what they mean are in ``docs/investigation.rst``.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from unittest.mock import patch

import numpy as np

from experiments import runs
from experiments.runs import Job, run_jobs
from experiments.table import PAPER_TABLE_I, PAPER_VR_MISTAKES_P0, summarise
from models.inputs.datasets import MajorityProblem
from models.voting import presets

__all__ = ["READINGS", "Reading", "Row", "applied", "format_rows", "main", "measure"]

Params = Mapping[str, Any]


@dataclass(frozen=True)
class Reading:
    """One candidate reading: parameters that replace the learners' own defaults.

    ``balanced``, ``perceptron`` and ``alma`` go to the binary learner inside each basic
    sub-expert algorithm of that kind; ``subexpert`` to the sub-expert conversion of the
    Balanced Winnow and Perceptron algorithms; ``voting`` to VR-Combine (V-Combine's and
    recycling's parameters), and ``noise_free_voting`` to VR-Combine at p = 0 only;
    ``problem`` to the majority problem.
    """

    name: str
    text: str
    balanced: Params = field(default_factory=dict)
    perceptron: Params = field(default_factory=dict)
    alma: Params = field(default_factory=dict)
    subexpert: Params = field(default_factory=dict)
    voting: Params = field(default_factory=dict)
    problem: Params = field(default_factory=dict)
    noise_free_voting: Params = field(default_factory=dict)

    def basic(self, spec: dict[str, Any]) -> dict[str, Any]:
        """A basic algorithm's spec with this reading's parameters."""
        inner = spec["learner"]
        extra = {
            "balanced-winnow": self.balanced,
            "perceptron": self.perceptron,
            "alma": self.alma,
        }[inner["kind"]]
        outer = self.subexpert if inner["kind"] != "alma" else {}
        return {**spec, **outer, "learner": {**inner, **extra}}

    def combined(self, other: Reading) -> Reading:
        """Both readings at once (``other`` wins where they set the same parameter)."""
        return Reading(
            f"{self.name}+{other.name}",
            f"{self.text}; {other.text}",
            {**self.balanced, **other.balanced},
            {**self.perceptron, **other.perceptron},
            {**self.alma, **other.alma},
            {**self.subexpert, **other.subexpert},
            {**self.voting, **other.voting},
            {**self.problem, **other.problem},
            {**self.noise_free_voting, **other.noise_free_voting},
        )


_TIES = {"subexpert_z": "runner_up"}
_C = {"C": 0.1}

_SINGLE = (
    Reading(
        "current",
        "the learners' own defaults: ALMA's C = sqrt 2, Balanced Winnow from w+ = w- = 1, "
        "u = 5 at every p",
    ),
    Reading("alma-C=0.1", "ALMA's learning-rate scale C = 0.1 (default sqrt 2)", alma=_C),
    Reading("alma-C=0.3", "ALMA's C = 0.3", alma={"C": 0.3}),
    Reading("alma-C=0.5", "ALMA's C = 0.5", alma={"C": 0.5}),
    Reading(
        "tie-update",
        "Balanced Winnow and Perceptron update on a correct prediction whose score ties "
        "another class's (z = x^y - x^c, c the tied runner-up; Figure 1's y(w.x) <= 0)",
        subexpert=_TIES,
    ),
    Reading(
        "tie-update-strict",
        "z from the runner-up, but Balanced Winnow updates only on a negative margin",
        balanced={"update_on_zero_margin": False},
        subexpert=_TIES,
    ),
    Reading(
        "balanced-init-2:1",
        "Balanced Winnow starts at w+ = 2, w- = 1 (the lectures' theta/2, theta/4)",
        balanced={"init_pos": 2.0, "init_neg": 1.0},
    ),
    Reading(
        "balanced-init-4:1",
        "Balanced Winnow starts at w+ = 4, w- = 1 (sensitivity, not a reading of a paper)",
        balanced={"init_pos": 4.0, "init_neg": 1.0},
    ),
    Reading(
        "balanced-init-10:1",
        "Balanced Winnow starts at w+ = 10, w- = 1 (sensitivity, not a reading of a paper)",
        balanced={"init_pos": 10.0, "init_neg": 1.0},
    ),
    Reading(
        "ties-order",
        "the problem breaks ties by the relevant sub-experts' order",
        problem={"ties": "order"},
    ),
    Reading(
        "u=50@p0",
        "recycling with u = 50 updates per instance on noise-free data (u = 5 otherwise): "
        "S4's u = infinity for noise-free data, bounded because ALMA's margin updates "
        "would otherwise go on without end",
        noise_free_voting={"max_updates": 50},
    ),
    Reading("d=25", "V-Combine's first restart wait d = 25", voting={"restart_wait": 25}),
    Reading("d=400", "restart wait d = 400", voting={"restart_wait": 400}),
    Reading("no-restarts", "V-Combine never restarts", voting={"restarts": False}),
    Reading(
        "accuracy=buffer", "hypotheses scored on the r-buffer only", voting={"accuracy": "buffer"}
    ),
    Reading("h=30", "h = 30 voting hypotheses (Littlestone's 1995 voting)", voting={"h": 30}),
    Reading(
        "window=0", "no search window: the hypothesis of the target trial", voting={"window": 0}
    ),
    Reading("r=0", "no r-buffer: on-line record only", voting={"r": 0}),
)

#: Every reading :func:`main` knows, by name: the single ones, then chosen combinations.
READINGS: dict[str, Reading] = {r.name: r for r in _SINGLE}
for _names in (
    ("tie-update", "alma-C=0.1"),
    ("tie-update", "u=50@p0"),
    ("alma-C=0.1", "u=50@p0"),
    ("balanced-init-2:1", "alma-C=0.1"),
    ("balanced-init-2:1", "tie-update"),
    ("balanced-init-2:1", "alma-C=0.1", "u=50@p0"),
    ("balanced-init-2:1", "alma-C=0.1", "tie-update", "u=50@p0"),
    ("balanced-init-2:1", "u=50@p0"),
    ("alma-C=0.5", "u=50@p0"),
    ("balanced-init-2:1", "alma-C=0.5", "u=50@p0"),
    ("balanced-init-4:1", "alma-C=0.5", "u=50@p0"),
    ("alma-C=0.3", "u=50@p0"),
    ("balanced-init-2:1", "alma-C=0.3", "u=50@p0"),
):
    _all = functools.reduce(Reading.combined, (READINGS[n] for n in _names))
    READINGS[_all.name] = _all


@contextmanager
def applied(reading: Reading, noise: float) -> Iterator[None]:
    """Run :mod:`experiments.runs` at ``noise`` with ``reading`` in force (in this process
    only).

    The basic algorithms (B, A-B and VR-Combine's members all come from
    :func:`models.voting.presets.basic_algorithms`), VR-Combine's spec and the problem are
    replaced for the duration, then restored.
    """
    basic: Callable[..., list[dict[str, Any]]] = presets.basic_algorithms
    spec: Callable[..., dict[str, Any]] = runs.vr_combine_spec

    def basic_algorithms(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return [reading.basic(s) for s in basic(*args, **kwargs)]

    def vr_combine_spec(**kwargs: Any) -> dict[str, Any]:
        free = reading.noise_free_voting if noise == 0 else {}
        return {**spec(**kwargs), **reading.voting, **free}

    problem = functools.partial(MajorityProblem, **reading.problem)
    with (
        patch.object(presets, "basic_algorithms", basic_algorithms),
        patch.object(runs, "vr_combine_spec", vr_combine_spec),
        patch.object(runs, "MajorityProblem", problem),
    ):
        yield


class Row(NamedTuple):
    """One reading at one noise level: means over the runs; each best is (name, error), and
    ``best_balanced`` is the best basic Sub-expert Balanced Winnow."""

    reading: str
    noise: float
    vr_mistakes: float
    vr_error: float
    best_b: tuple[str, float]
    best_a: tuple[str, float]
    best_ar: tuple[str, float]
    best_balanced: tuple[str, float]


def measure(
    reading: Reading,
    noises: Sequence[float],
    n_runs: int,
    trials: int,
    test: int,
    seed: int = 0,
) -> list[Row]:
    """``n_runs`` runs of the protocol per noise level with ``reading`` in force, on one
    process; the streams are those of ``committee experiment table1`` with the same seed."""
    rows = []
    for p in noises:
        jobs = [Job(p, run, seed, trials, test, False, min(200, test)) for run in range(n_runs)]
        with applied(reading, p):
            results = run_jobs(jobs, workers=1, progress=None)
        s = summarise(results, p)
        rows.append(
            Row(
                reading.name,
                p,
                s["vr_combine"]["online_mistakes"],
                s["vr_combine"]["mean"],
                (s["best_b"]["name"], s["best_b"]["mean"]),
                (s["best_a"]["name"], s["best_a"]["mean"]),
                (s["best_ar"]["name"], s["best_ar"]["mean"]),
                _best_balanced(s["learners"]),
            )
        )
    return rows


def _best_balanced(learners: Mapping[str, Mapping[str, Any]]) -> tuple[str, float]:
    """The basic Sub-expert Balanced Winnow with the lowest mean final error."""
    name = min(
        (n for n in learners if n.startswith("Balanced(")), key=lambda n: learners[n]["mean"]
    )
    return name, float(learners[name]["mean"])


def _paper_rows(noises: Sequence[float]) -> list[Row]:
    rows = []
    for p in noises:
        ref = PAPER_TABLE_I.get(p)
        if ref is None:
            continue
        mistakes = float(PAPER_VR_MISTAKES_P0) if p == 0 else float("nan")
        rows.append(
            Row(
                "paper",
                p,
                mistakes,
                ref.vr_combine[0],
                (ref.best_b[0], ref.best_b[1]),
                (ref.best_a[0], ref.best_a[1]),
                (ref.best_ar[0], ref.best_ar[1]),
                (ref.best_b[0], ref.best_b[1]) if "Balanced" in ref.best_b[0] else ("-", np.nan),
            )
        )
    return rows


HEADER = (
    "reading",
    "p",
    "VR mistakes",
    "VR error",
    "Best(B)",
    "Best(A-B)",
    "Best(AR-B)",
    "best Balanced(B)",
)
_WIDTHS = (46, 5, 11, 8, 24, 26, 27, 23)


def format_rows(rows: Sequence[Row]) -> str:
    """The rows as a fixed-width text table under :data:`HEADER`."""

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, _WIDTHS, strict=True)).rstrip()

    out = [line(HEADER)]
    for r in rows:
        mistakes = "-" if np.isnan(r.vr_mistakes) else f"{r.vr_mistakes:.1f}"
        out.append(
            line(
                (
                    r.reading,
                    f"{r.noise:g}",
                    mistakes,
                    f"{r.vr_error:.5f}",
                    *(
                        "-" if np.isnan(mean) else f"{name} {mean:.5f}"
                        for name, mean in (r.best_b, r.best_a, r.best_ar, r.best_balanced)
                    ),
                )
            )
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.readings",
        description="Measure candidate readings of S4 with the Table I protocol.",
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per noise level (3)")
    parser.add_argument("--trials", type=int, default=5000, help="trials per run (5000)")
    parser.add_argument("--test", type=int, default=10_000, help="test instances (10000)")
    parser.add_argument("--noise", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.3])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--only", nargs="+", choices=sorted(READINGS), metavar="NAME", help="these readings"
    )
    parser.add_argument(
        "--quick", action="store_true", help="1 run of 200 trials, 500 test instances"
    )
    parser.add_argument("--list", action="store_true", help="list the readings and stop")
    args = parser.parse_args(argv)
    if args.list:
        for r in READINGS.values():
            print(f"{r.name}: {r.text}")
        return 0
    if args.quick:
        args.runs, args.trials, args.test = 1, 200, 500
    names = args.only or list(READINGS)
    print(
        f"{args.runs} runs of {args.trials} trials, {args.test} test instances, "
        f"seed {args.seed}; means over the runs"
    )
    print(format_rows(_paper_rows(args.noise)))
    for name in names:
        rows = measure(READINGS[name], args.noise, args.runs, args.trials, args.test, args.seed)
        print(format_rows(rows).split("\n", 1)[1], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
