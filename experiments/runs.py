"""One run of S4's protocol on the majority problem (Mesterharm & Hsu, §VII), and many on
all cores.

For every noise level and run, the paper's 31 basic algorithms (each inside an averaging
wrapper, so one learner gives both B and A-B) and VR-Combine (a v-combine over their 31
recycled and 31 averaged-recycled versions) learn the same stream; then every frozen
predictor is scored on fresh noisy test instances.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO, TypeVar

import numpy as np

from experiments.scoring import TestVotes, check_predictions, predict_classes
from models.core.learner import Learner
from models.inputs.datasets import MajorityProblem
from models.registry import build
from models.voting import presets
from models.voting.presets import ALPHAS, PS
from models.voting.vcombine import VCombine
from models.warm import place_cache

__all__ = [
    "ALMA_PS",
    "BALANCED_ALPHAS",
    "FAMILIES",
    "Job",
    "RunFailed",
    "RunResult",
    "algorithm_name",
    "basic_algorithms",
    "job_vr_combine_spec",
    "member_names",
    "run_job",
    "run_jobs",
    "vr_combine_spec",
]

# -- the algorithms (§VII; the readings taken: docs/readings.rst) -------------------------

#: Sub-expert Balanced Winnow's 15 alphas, from 1.01 to 1.6 (the paper gives only the range).
BALANCED_ALPHAS = ALPHAS
ALMA_PS = PS
FAMILIES = (("B", ""), ("A-B", "A-"), ("R-B", "R-"), ("AR-B", "AR-"))


def algorithm_name(spec: dict[str, Any]) -> str:
    """The paper's name of a basic sub-expert algorithm: Balanced(1.35), Perceptron, ALMA(2.5)."""
    inner = spec["learner"]
    if inner["kind"] == "balanced-winnow":
        return f"Balanced({inner['alpha']:g})"
    if inner["kind"] == "alma":
        return f"ALMA({inner['p']:g})"
    return "Perceptron"


def basic_algorithms(
    alma_C: float | None = None, balanced_init: tuple[float, float] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """S4's 31 basic algorithms as (name, spec), in the order that breaks ties between
    members (models.voting.presets; None keeps a learner's own default).

    >>> [name for name, _ in basic_algorithms()][13:18]
    ['Balanced(1.55)', 'Balanced(1.6)', 'Perceptron', 'ALMA(2)', 'ALMA(2.5)']
    """
    specs = presets.basic_algorithms(alma_C=alma_C, balanced_init=balanced_init)
    return [(algorithm_name(spec), spec) for spec in specs]


def vr_combine_spec(
    *,
    h: int = 20,
    r: int = 100,
    window: int = 100,
    restart_wait: int = 100,
    size: int = 100,
    max_updates: int = 5,
) -> dict[str, Any]:
    """The ``vr-combine`` preset with S4's parameters spelled out (§VII)."""
    return {
        "kind": "vr-combine",
        "h": h,
        "r": r,
        "window": window,
        "restart_wait": restart_wait,
        "size": size,
        "max_updates": max_updates,
    }


def member_names() -> list[str]:
    """Every member's name: the 31 B, then A-B, R-B and AR-B, each in the members' order."""
    names = [name for name, _ in basic_algorithms()]
    return [prefix + name for _, prefix in FAMILIES for name in names]


# -- one run --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One (noise, run) of the protocol; the streams come from (seed, noise, run) alone."""

    noise: float
    run: int
    seed: int = 0
    trials: int = 5000
    test: int = 50_000
    curves: bool = False
    check: int = 200  # test instances checked against predict_class
    # The readings of what the paper leaves open (docs/investigation.rst); None keeps the
    # learners' own defaults. ALMA's scale C; Balanced Winnow's initial (w+, w-); recycling's
    # update cap u on noise-free data (the paper: u = infinity when there is no noise).
    alma_C: float | None = None
    balanced_init: tuple[float, float] | None = None
    noise_free_updates: int | None = None

    def seeds(self) -> tuple[np.random.Generator, np.random.Generator]:
        """Independent training and test generators."""
        root = np.random.SeedSequence([self.seed, round(self.noise * 1_000_000), self.run])
        train, test = root.spawn(2)
        return np.random.default_rng(train), np.random.default_rng(test)


@dataclass
class RunResult:
    """Final errors and on-line mistakes of one run, members in :func:`member_names` order."""

    noise: float
    run: int
    errors: np.ndarray  # final error of each member
    vr_error: float
    mistakes: np.ndarray  # real on-line mistakes of each member
    vr_mistakes: int
    curves: np.ndarray | None  # (members + 1, trials) cumulative mistakes, VR-Combine last
    seconds: dict[str, float] = field(default_factory=dict)


class RunFailed(RuntimeError):
    """A run of the protocol raised; the message names the run and the error."""


_L = TypeVar("_L", bound=Learner)


def _build(cls: type[_L], spec: dict[str, Any], problem: MajorityProblem) -> _L:
    learner = build(spec, labels=list(range(problem.k)), size=problem.n_experts)
    if not isinstance(learner, cls):
        raise TypeError(f"{spec['kind']} built a {type(learner).__name__}, not a {cls.__name__}")
    return learner


def _basic_spec(alma_C: float | None, balanced_init: tuple[float, float] | None) -> dict[str, Any]:
    """B and A-B of the 31 basic algorithms as the members of one v-combine, whose vote is
    not used: so they learn in one compiled call per trial, like VR-Combine's members.

    B is a recycling wrapper that never recycles (``max_updates`` 0), which learns,
    predicts and snapshots exactly as B; each A-B member follows its B.
    """
    plain = [
        {"kind": "recycling", "size": 1, "max_updates": 0, "learner": spec}
        for _, spec in basic_algorithms(alma_C, balanced_init)
    ]
    averaged = [{"kind": "averaging", "learner": p} for p in plain]
    return {"kind": "v-combine", "learners": plain + averaged, "h": 2, "r": 0, "window": 0}


def job_vr_combine_spec(job: Job) -> dict[str, Any]:
    """The VR-Combine a job runs: S4's parameters with the job's readings (u = 5 on noisy
    data, the job's ``noise_free_updates`` at p = 0 when it has one)."""
    updates = 5 if job.noise != 0 or job.noise_free_updates is None else job.noise_free_updates
    return {
        **vr_combine_spec(max_updates=updates),
        "alma_C": job.alma_C,
        "balanced_init": None if job.balanced_init is None else list(job.balanced_init),
    }


def run_job(job: Job) -> RunResult:
    """Train every learner on one stream, then score every frozen predictor (§VII).

    Raises :class:`RunFailed` (naming the run) if a learner raises.
    """
    try:
        return _run(job)
    except Exception as exc:
        raise RunFailed(
            f"run {job.run} at noise {job.noise:g}: {type(exc).__name__}: {exc}"
        ) from exc


def _run(job: Job) -> RunResult:
    problem = MajorityProblem(n=20, r=10, k=5, noise=job.noise)
    train_rng, test_rng = job.seeds()
    xs, ys, _ = problem.sample(job.trials, train_rng)
    basic = _build(VCombine, _basic_spec(job.alma_C, job.balanced_init), problem)
    vr = _build(VCombine, job_vr_combine_spec(job), problem)
    members = basic.learners_ + vr.learners_
    counts = np.zeros((job.trials, len(members) + 1), dtype=np.int32)
    seconds = {"basic": 0.0, "vr_combine": 0.0, "evaluate": 0.0}
    for t, (x, y) in enumerate(zip(xs, ys, strict=True)):
        start = time.perf_counter()
        basic.learn(x, int(y))
        mid = time.perf_counter()
        vr.learn(x, int(y))
        seconds["basic"] += mid - start
        seconds["vr_combine"] += time.perf_counter() - mid
        counts[t] = [m.mistakes_ for m in members] + [vr.mistakes_]

    start = time.perf_counter()
    votes = problem.sample_votes(job.test, test_rng)
    y_test = problem.add_noise(problem.clean_labels(votes), test_rng)
    tests = TestVotes.majority(problem, votes)
    sample = [problem.instance(v) for v in votes[: job.check]]
    names = [*member_names(), "VR-Combine"]
    frozen = [m.snapshot() for m in members] + [vr.snapshot()]
    errors = np.empty(len(frozen))
    for i, (name, h) in enumerate(zip(names, frozen, strict=True)):
        predicted = predict_classes(h, tests)
        check_predictions(name, h, predicted, sample)
        errors[i] = np.mean(predicted != y_test)
    seconds["evaluate"] = time.perf_counter() - start
    final = counts[-1].astype(np.int64) if job.trials else np.zeros(len(members) + 1, np.int64)
    return RunResult(
        noise=job.noise,
        run=job.run,
        errors=errors[:-1],
        vr_error=float(errors[-1]),
        mistakes=final[:-1],
        vr_mistakes=int(final[-1]),
        curves=counts.T.copy() if job.curves else None,
        seconds=seconds,
    )


def _progress(done: int, total: int, started: float, stream: TextIO) -> None:
    width = 30
    filled = width * done // total
    elapsed = time.monotonic() - started
    eta = elapsed / done * (total - done) if done else 0.0
    bar = "#" * filled + "." * (width - filled)
    line = f"[{bar}] {done}/{total} runs, {elapsed:.0f} s elapsed, ~{eta:.0f} s left"
    if stream.isatty():
        stream.write("\r" + line + ("\n" if done == total else ""))
    else:
        stream.write(line + "\n")
    stream.flush()


def run_jobs(
    jobs: Sequence[Job], workers: int, progress: TextIO | None = sys.stderr
) -> list[RunResult]:
    """Run ``jobs`` on ``workers`` processes (in this one when 1), sorted by (noise, run).

    The pool uses the spawn start method; numba loads the compiled kernels from its disk
    cache in each worker. A text progress bar goes to ``progress`` after every finished run.
    """
    order = sorted(jobs, key=lambda j: -j.noise)  # noisier runs recycle more: start them first
    started = time.monotonic()
    results: list[RunResult] = []

    def collect(items: Iterable[RunResult]) -> None:
        if progress is not None:
            _progress(0, len(order), started, progress)
        try:
            for result in items:
                results.append(result)
                if progress is not None:
                    _progress(len(results), len(order), started, progress)
        finally:
            if progress is not None and progress.isatty() and len(results) < len(order):
                progress.write("\n")  # end the bar's line before an error

    workers = max(1, min(workers, len(order)))
    if workers == 1:
        collect(map(run_job, order))
    else:
        # each process's kernels from the cache `committee warm` fills (keyed on the sources)
        with multiprocessing.get_context("spawn").Pool(workers, initializer=place_cache) as pool:
            collect(pool.imap_unordered(run_job, order))
    return sorted(results, key=lambda r: (r.noise, r.run))
