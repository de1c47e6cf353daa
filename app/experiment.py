"""S4's experiments on the majority problem: Table I and Figure 5 (ALGORITHMS.md §5).

``committee experiment table1`` runs the protocol of §5.2: for every noise level and run,
the 31 basic algorithms of §3.4 (each inside an averaging wrapper, so one learner gives both
B and A-B) and VR-Combine (a v-combine over their 31 recycled and 31 averaged-recycled
versions) learn the same stream; then every frozen predictor is scored on fresh noisy test
instances. ``committee experiment curves`` draws Figure 5, the on-line mistakes.

Test instances are scored in bulk: the test set is a (count, N) matrix of the classes the
N sub-experts vote for, and a linear-max hypothesis's scores are gathered from its weights
one sub-expert at a time, which adds exactly what ``LinearMaxHypothesis.scores`` adds, in
the same order, so predictions (ties included) are identical. Each run checks that on a
sample of test instances against ``predict_class``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TextIO, TypeVar

import numpy as np

from models import presets
from models.averaging import Averaging
from models.base import Hypothesis, Learner, LinearMaxHypothesis
from models.datasets import MajorityProblem
from models.presets import ALPHAS, PS
from models.registry import build
from models.voting import VCombine, VotingHypothesis

__all__ = [
    "ALMA_PS",
    "BALANCED_ALPHAS",
    "FAMILIES",
    "PAPER_TABLE_I",
    "Job",
    "RunFailed",
    "RunResult",
    "basic_algorithms",
    "best_member",
    "member_names",
    "predict_classes",
    "run_job",
    "run_jobs",
    "summarise",
    "t_quantile",
    "t_quantile_table",
    "vr_combine_spec",
]

# -- the algorithms (§3.4, A1, A11) ------------------------------------------------------------

#: Sub-expert Balanced Winnow's 15 alphas (Ambiguity A1's proposal).
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


def basic_algorithms(alma_C: float | None = None) -> list[tuple[str, dict[str, Any]]]:
    """S4's 31 basic algorithms as (name, spec), in A11's order (models.presets).

    >>> [name for name, _ in basic_algorithms()][13:18]
    ['Balanced(1.55)', 'Balanced(1.6)', 'Perceptron', 'ALMA(2)', 'ALMA(2.5)']
    """
    return [(algorithm_name(spec), spec) for spec in presets.basic_algorithms(alma_C=alma_C)]


def vr_combine_spec(
    *,
    h: int = 20,
    r: int = 100,
    window: int = 100,
    restart_wait: int = 100,
    size: int = 100,
    max_updates: int = 5,
) -> dict[str, Any]:
    """The ``vr-combine`` preset with S4's parameters spelled out (§3.4)."""
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
    """Every member's name: the 31 B, then A-B, R-B and AR-B, each in A11's order."""
    names = [name for name, _ in basic_algorithms()]
    return [prefix + name for _, prefix in FAMILIES for name in names]


# -- vectorised scoring -------------------------------------------------------------------------


class TestVotes:
    """A test set of one-hot sub-expert instances: ``votes[t, e]`` is the class sub-expert e
    votes for (with value 1) in instance t."""

    __test__ = False  # not a pytest class

    def __init__(self, votes: np.ndarray, k: int) -> None:
        self.votes = np.asarray(votes, dtype=np.int64)
        self.k = k
        count, n = self.votes.shape
        # one_hot[e, t, j]: x_e^j of instance t; a sub-expert voting for one class in every
        # instance (a threshold sub-expert) has that class in ``constant`` instead
        self.constant = np.full(n, -1, dtype=np.int64)
        same = (self.votes == self.votes[:1]).all(axis=0) if count else np.ones(n, bool)
        self.constant[same] = self.votes[0, same] if count else 0
        self.one_hot = np.ascontiguousarray(self.votes.T[:, :, None] == np.arange(k))

    @classmethod
    def majority(cls, problem: MajorityProblem, votes: np.ndarray) -> TestVotes:
        """The N = n + k sub-experts of majority instances with random votes ``votes``."""
        thresholds = np.broadcast_to(np.arange(problem.k), (votes.shape[0], problem.k))
        return cls(np.concatenate([votes, thresholds], axis=1), problem.k)

    def __len__(self) -> int:
        return int(self.votes.shape[0])

    def linear_max(self, w: np.ndarray) -> np.ndarray:
        """s[t, j] = sum_e w_e x_e^j, shape (count, k).

        Every class adds its sub-experts' w_e * 1.0 = w_e in the order of e, exactly as
        ``linear_max_scores`` does; the other classes add w_e * 0.0 = +-0.0, which changes no
        value, so the scores are bit for bit the compiled kernel's (weights are finite).
        """
        s = np.zeros((len(self), self.k))
        term = np.empty_like(s)
        for e, c in enumerate(self.constant.tolist()):
            if c >= 0:
                s[:, c] += w[e]
            else:
                np.multiply(self.one_hot[e], w[e], out=term)
                s += term
        return s


def hypothesis_scores(h: Hypothesis, tests: TestVotes) -> np.ndarray:
    """``h.scores`` of every test instance, shape (count, k), computed as ``h`` does."""
    if isinstance(h, LinearMaxHypothesis):
        return tests.linear_max(h.weights) * h.scale
    if isinstance(h, VotingHypothesis):
        total = np.zeros((len(tests), tests.k))
        for voter in h.voters:
            s = hypothesis_scores(voter, tests)
            if h.normalize != "none":
                a = np.abs(s)
                z = (a.sum(axis=1) if h.normalize == "l1" else a.max(axis=1))[:, None]
                s = s / np.where(z > 0, z, 1.0)
            total = total + s
        return total
    raise TypeError(f"no vectorised scoring for {type(h).__name__}")


def predict_classes(h: Hypothesis, tests: TestVotes) -> np.ndarray:
    """``h.predict_class`` of every test instance (first arg-max, as the hypothesis has it)."""
    if isinstance(h, LinearMaxHypothesis):  # predicts from the unscaled scores
        return np.argmax(tests.linear_max(h.weights), axis=1)
    return np.argmax(hypothesis_scores(h, tests), axis=1)


def check_predictions(name: str, h: Hypothesis, fast: np.ndarray, instances: Sequence[Any]) -> None:
    """Raise AssertionError unless ``fast`` starts with ``h.predict_class`` of ``instances``."""
    for i, x in enumerate(instances):
        slow = h.predict_class(x)
        if slow != fast[i]:
            raise AssertionError(
                f"vectorised evaluation of {name} predicts {fast[i]} on test instance {i}, "
                f"predict_class gives {slow}"
            )


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
    alma_C: float | None = None  # ALMA's learning-rate scale (A8); None: ALMA's default

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


def run_job(job: Job) -> RunResult:
    """Train every learner on one stream, then score every frozen predictor (§5.2).

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
    basics = [spec for _, spec in basic_algorithms(job.alma_C)]
    averaged = [_build(Averaging, {"kind": "averaging", "learner": s}, problem) for s in basics]
    vr = _build(VCombine, {**vr_combine_spec(), "alma_C": job.alma_C}, problem)
    members = [a.learner_ for a in averaged] + averaged + vr.learners_
    counts = np.zeros((job.trials, len(members) + 1), dtype=np.int32)
    seconds = {"basic": 0.0, "vr_combine": 0.0, "evaluate": 0.0}
    for t, (x, y) in enumerate(zip(xs, ys, strict=True)):
        start = time.perf_counter()
        for a in averaged:
            a.learn(x, int(y))
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
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            collect(pool.imap_unordered(run_job, order))
    return sorted(results, key=lambda r: (r.noise, r.run))


# -- statistics and the table ---------------------------------------------------------------------

# t_{0.975, dof} for dof = 1..30.
_T975 = (
    12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004,
    2.262157, 2.228139, 2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905,
    2.109816, 2.100922, 2.093024, 2.085963, 2.079614, 2.073873, 2.068658, 2.063899,
    2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272,
)  # fmt: skip
_Z975 = 1.959964


def t_quantile(dof: int) -> float:
    """Student's t_{0.975, dof}: scipy's when installed, else :func:`t_quantile_table`.

    >>> round(t_quantile(19), 3)
    2.093
    """
    try:
        from scipy.stats import t  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        return t_quantile_table(dof)
    return float(t.ppf(0.975, dof))


def t_quantile_table(dof: int) -> float:
    """t_{0.975, dof} from a table for 1..30 dof and, beyond, the normal quantile with the
    Cornish-Fisher correction for dof (error < 1e-4 there; the bare normal value would be
    4% low at 31 dof)."""
    if dof <= len(_T975):
        return _T975[dof - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)


def mean_half_width(values: np.ndarray) -> tuple[float, float | None]:
    """The mean and the 95% t half-width t * s / sqrt(n) (None for a single value)."""
    n = len(values)
    mean = float(np.mean(values))
    if n < 2:
        return mean, None
    return mean, t_quantile(n - 1) * float(np.std(values, ddof=1)) / math.sqrt(n)


def best_member(errors: np.ndarray, family: str) -> int:
    """The index of ``family``'s member with the lowest mean error over runs (the first on
    ties, A11's order); ``errors`` has one row per run, members as in :func:`member_names`."""
    per = errors.shape[1] // len(FAMILIES)
    start = per * [name for name, _ in FAMILIES].index(family)
    return start + int(np.argmin(errors[:, start : start + per].mean(axis=0)))


def summarise(results: Sequence[RunResult], noise: float) -> dict[str, Any]:
    """One JSON row of Table I: VR-Combine and the best (lowest mean) of AR-B, A-B and B."""
    runs = [r for r in results if r.noise == noise]
    errors = np.array([r.errors for r in runs])
    names = member_names()
    m, hw = mean_half_width(np.array([r.vr_error for r in runs]))
    row: dict[str, Any] = {"noise": noise, "vr_combine": {"mean": m, "half_width": hw}}
    for key, family in (("best_ar", "AR-B"), ("best_a", "A-B"), ("best_b", "B")):
        best = best_member(errors, family)
        m, hw = mean_half_width(errors[:, best])
        row[key] = {"name": names[best], "mean": m, "half_width": hw}
    return row


class PaperRow(NamedTuple):
    """One row of S4's Table I: (mean, half-width) and (name, mean, half-width) entries."""

    vr_combine: tuple[float, float]
    best_ar: tuple[str, float, float]
    best_a: tuple[str, float, float]
    best_b: tuple[str, float, float]


#: REFERENCE DATA: S4's Table I as printed (ALGORITHMS.md §5.3), by noise level. The
#: "0 + .00001" entries at p = 0 are mean 0 with half-width 1e-5.
PAPER_TABLE_I: dict[float, PaperRow] = {
    0.0: PaperRow((0.0, 0.00001), ("AR-Perceptron", 0.0, 0.00001),
                  ("A-Perceptron", 0.00110, 0.00021), ("ALMA(2)", 0.00738, 0.00090)),
    0.01: PaperRow((0.01029, 0.00012), ("AR-Perceptron", 0.01029, 0.00012),
                   ("A-ALMA(4)", 0.01149, 0.00028), ("Balanced(1.03)", 0.02892, 0.00124)),
    0.05: PaperRow((0.05148, 0.00023), ("AR-Perceptron", 0.05172, 0.00026),
                   ("A-Balanced(1.35)", 0.05781, 0.00092), ("Balanced(1.03)", 0.10245, 0.00312)),
    0.1: PaperRow((0.10237, 0.00027), ("AR-Perceptron", 0.10300, 0.00040),
                  ("A-Balanced(1.5)", 0.11211, 0.00112), ("Balanced(1.03)", 0.21769, 0.00500)),
    0.2: PaperRow((0.20285, 0.00118), ("AR-Balanced(1.2)", 0.20713, 0.00062),
                  ("A-Balanced(1.6)", 0.22684, 0.00184), ("Balanced(1.01)", 0.31884, 0.00148)),
    0.3: PaperRow((0.31155, 0.00132), ("AR-Balanced(1.25)", 0.31047, 0.00121),
                  ("A-Balanced(1.6)", 0.33598, 0.00143), ("Balanced(1.01)", 0.45549, 0.00255)),
    0.4: PaperRow((0.42097, 0.00121), ("AR-Balanced(1.3)", 0.42271, 0.00128),
                  ("A-Balanced(1.6)", 0.43952, 0.00118), ("Balanced(1.01)", 0.54821, 0.00269)),
}  # fmt: skip

#: The paper's mean on-line mistakes of VR-Combine at p = 0 (S4 §VII).
PAPER_VR_MISTAKES_P0 = 34


def _pm(mean: float, hw: float | None) -> str:
    return f"{mean:.5f} ± {hw:.5f}" if hw is not None else f"{mean:.5f} ± n/a"


def _line(cells: Sequence[str]) -> str:
    widths = (5, 8, 19, 38, 38, 38)
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def format_table(rows: Sequence[dict[str, Any]], results: Sequence[RunResult]) -> str:
    """Table I as text, each measured row followed by the paper's, then VR-Combine's
    on-line mistakes and the time a run took."""
    lines = [
        "Table I: final error, mean ± 95% t half-width over runs "
        "(r = 10, k = 5, n = 20 + 5 threshold sub-experts)",
        _line(("p", "", "VR-Combine", "Best(AR-B)", "Best(A-B)", "Best(B)")),
    ]
    for row in rows:
        cells = [_pm(row["vr_combine"]["mean"], row["vr_combine"]["half_width"])]
        for key in ("best_ar", "best_a", "best_b"):
            e = row[key]
            cells.append(f"{e['name']} {_pm(e['mean'], e['half_width'])}")
        lines.append(_line([f"{row['noise']:g}", "measured", *cells]))
        paper = PAPER_TABLE_I.get(row["noise"])
        if paper is not None:
            ref = [_pm(*paper.vr_combine)]
            ref += [f"{n} {_pm(m, h)}" for n, m, h in (paper.best_ar, paper.best_a, paper.best_b)]
            lines.append(_line(["", "S4 paper", *ref]))
    lines += [
        "",
        f"VR-Combine on-line mistakes, mean over runs (S4: {PAPER_VR_MISTAKES_P0} at p = 0):",
    ]
    for row in rows:
        counts = [r.vr_mistakes for r in results if r.noise == row["noise"]]
        lines.append(f"  p = {row['noise']:g}: {np.mean(counts):.1f}")
    secs = {key: np.mean([r.seconds[key] for r in results]) for key in results[0].seconds}
    lines.append(
        "seconds per run, mean: "
        + ", ".join(f"{key.replace('_', '-')} {value:.1f}" for key, value in secs.items())
    )
    return "\n".join(lines)


# -- the commands --------------------------------------------------------------------------------


def _jobs(args: argparse.Namespace, noises: Sequence[float], curves: bool) -> list[Job]:
    return [
        Job(p, run, args.seed, args.trials, args.test, curves, min(200, args.test), args.alma_c)
        for p in noises
        for run in range(args.runs)
    ]


def table1(args: argparse.Namespace) -> int:
    """Run the §5.2 protocol and print Table I (or its JSON document with ``--json``)."""
    try:
        results = run_jobs(_jobs(args, args.noise, curves=False), args.workers)
    except RunFailed as exc:
        print(f"committee experiment table1: {exc}", file=sys.stderr)
        return 1
    rows = [summarise(results, p) for p in args.noise]
    if args.json:
        print(json.dumps({"rows": rows}))
    else:
        print(
            f"{args.runs} runs of {args.trials} trials, {args.test} test instances, "
            f"seed {args.seed}"
        )
        print(format_table(rows, results))
    return 0


def curves(args: argparse.Namespace) -> int:
    """Figure 5: cumulative on-line mistakes against trials, mean over runs, as a PNG."""
    try:
        import matplotlib
    except ImportError:
        print(
            "committee experiment curves needs matplotlib: pip install 'committee[experiments]'",
            file=sys.stderr,
        )
        return 1
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    try:
        results = run_jobs(_jobs(args, [args.noise], curves=True), args.workers)
    except RunFailed as exc:
        print(f"committee experiment curves: {exc}", file=sys.stderr)
        return 1
    errors = np.array([r.errors for r in results])
    runs = [r.curves for r in results if r.curves is not None]
    mean_curves = np.mean(runs, axis=0)  # (members + 1, trials), VR-Combine last
    names = member_names()
    t = np.arange(1, args.trials + 1)
    picked = {family: best_member(errors, family) for family in ("B", "A-B", "AR-B")}
    lines = [(f"best {family}: {names[i]}", mean_curves[i]) for family, i in picked.items()]
    lines += [("VR-Combine", mean_curves[-1]), (f"optimal ({args.noise:g} t)", args.noise * t)]
    fig, ax = plt.subplots(figsize=(7, 5))
    for label, curve in lines:
        if label.startswith("optimal"):
            ax.plot(t, curve, label=label, color="black", linestyle="--")
        else:
            ax.plot(t, curve, label=label)
    ax.set_xlabel("trials")
    ax.set_ylabel("cumulative mistakes")
    ax.set_title(f"Majority problem, p = {args.noise:g}: mean of {args.runs} runs (S4 Fig. 5)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, format="png")
    plt.close(fig)
    for label, curve in lines:
        print(f"{label}: {curve[-1]:.1f} mistakes after {args.trials} trials")
    print(f"wrote {args.out}")
    return 0


def _count(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value

    return parse


def _noise(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a noise rate in [0, 1], got {value:g}")
    return value


def _noises(text: str) -> list[float]:
    values = [_noise(part) for part in text.split(",") if part.strip()]
    if not values or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected distinct comma-separated rates, got {text!r}")
    return values


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=_count(1), default=20, help="independent runs (20)")
    p.add_argument("--trials", type=_count(1), default=5000, help="on-line trials (5000)")
    p.add_argument("--test", type=_count(1), default=50_000, help="test instances (50000)")
    p.add_argument("--seed", type=_count(0), default=0, help="root seed (0)")
    p.add_argument(
        "--alma-c",
        type=float,
        default=None,
        help="ALMA's learning-rate scale C (ALMA's default sqrt(2) when not given; S4 is silent)",
    )
    p.add_argument(
        "--workers", type=_count(1), default=os.cpu_count() or 1, help="processes (all cores)"
    )


def add_parser(sub: Any) -> None:
    """Add ``experiment table1`` and ``experiment curves`` to the CLI's subcommands."""
    exp = sub.add_parser("experiment", help="S4's experiments on the majority problem")
    commands = exp.add_subparsers(dest="experiment", required=True)
    p = commands.add_parser("table1", help="Table I: final errors, beside the paper's")
    _common(p)
    p.add_argument(
        "--noise",
        type=_noises,
        default=[0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4],
        help="comma-separated noise rates (0,0.01,0.05,0.1,0.2,0.3,0.4)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document only")
    p.set_defaults(func=table1)
    p = commands.add_parser("curves", help="Figure 5: cumulative mistakes as a PNG")
    _common(p)
    p.add_argument("--noise", type=_noise, default=0.05, help="noise rate (0.05)")
    p.add_argument("--out", default="fig5.png", help="PNG file to write (fig5.png)")
    p.set_defaults(func=curves)
