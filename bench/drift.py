"""False alarms and detection delays of the drift detectors on 0/1 mistake streams, and
their speed against River's in the same run.

- False alarms: ``STREAMS`` stationary Bernoulli streams of 100,000 trials at each error
  rate of ``RATES``, per detector at its defaults and at River's defaults; alarms per
  100,000 trials (target 0 for the defaults).
- Delay: ``DELAY_STREAMS`` streams whose error rate steps from 0.1 to 0.4 after
  10,000 and after 50,000 stationary trials; the trials from the step to the first alarm
  after it (median and largest; the largest's target is the detector's documented
  :data:`models.drift.STEP_DELAY`), the streams with no alarm in the 20,000 trials after
  it, and alarms before the step.
- Speed: one stream of 200,000 trials (a step half-way), taken by ``update_many`` against
  River's detector fed the same values one by one (River has no batch call), each side
  the best of ``ROUNDS`` alternating rounds, after checking that both fire at the same
  indices; also ``update`` one value at a time against River's (information).

Every stream is made from a fixed seed. Run as ``python bench/drift.py``; the last line,
``drift_speed_vs_river``, is the slower detector's ``update_many`` against River.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from _results import recorded, target_line
from river import drift as river_drift

from models.drift import ADWIN, STEP_DELAY, DriftDetector, PageHinkley

N = 100_000
RATES = (0.05, 0.1, 0.25, 0.5)
STEP = (0.1, 0.4)
BEFORE = (10_000, 50_000)
AFTER = 20_000
ROUNDS = 5
SPEED_TRIALS = 200_000

RIVER = {"adwin": river_drift.ADWIN, "page_hinkley": river_drift.PageHinkley}
OURS: dict[str, type[DriftDetector]] = {"adwin": ADWIN, "page_hinkley": PageHinkley}


def river_defaults(name: str) -> dict[str, Any]:
    """River's constructor defaults for the detector ``name``, read from its signature."""
    params = inspect.signature(RIVER[name]).parameters
    return {k: p.default for k, p in params.items()}


def settings() -> dict[str, Callable[[], DriftDetector]]:
    """Each detector at its defaults and at River's."""
    out: dict[str, Callable[[], DriftDetector]] = {}
    for name, cls in OURS.items():
        out[name] = cls
        out[f"{name}_river_defaults"] = functools.partial(cls, **river_defaults(name))
    return out


def bernoulli(rng: np.random.Generator, rate: float, n: int) -> np.ndarray:
    return (rng.random(n) < rate).astype(np.float64)


def false_alarms(make: Callable[[], DriftDetector], streams: int) -> tuple[int, int]:
    """Alarms on the stationary streams, and the trials they span."""
    alarms = 0
    for r, rate in enumerate(RATES):
        for s in range(streams):
            xs = bernoulli(np.random.default_rng([1, r, s]), rate, N)
            alarms += len(make().update_many(xs))
    return alarms, streams * len(RATES) * N


def delays(make: Callable[[], DriftDetector], before: int, streams: int) -> dict[str, float]:
    """Trials from the step to the first alarm after it, over ``streams`` streams."""
    found, missed, early = [], 0, 0
    for s in range(streams):
        rng = np.random.default_rng([2, before, s])
        xs = np.r_[bernoulli(rng, STEP[0], before), bernoulli(rng, STEP[1], AFTER)]
        fired = make().update_many(xs)
        early += int((fired < before).sum())
        after = fired[fired >= before]
        if after.size:
            found.append(int(after[0]) - before)
        else:
            missed += 1
    return {
        "median": float(np.median(found)) if found else float("nan"),
        "max": float(max(found, default=float("nan"))),
        "missed": missed,
        "early": early,
    }


def river_fired(detector: Any, values: list[float]) -> list[int]:
    out = []
    for t, x in enumerate(values):
        detector.update(x)
        if detector.drift_detected:
            out.append(t)
    return out


def ours_one_by_one(detector: DriftDetector, values: list[float]) -> list[int]:
    return [t for t, x in enumerate(values) if detector.update(x)]


def speed(name: str, rounds: int) -> float:
    """``update_many`` against River one by one, on the same stream (River's defaults, so
    that both detectors run the same test); River's time over ours."""
    rng = np.random.default_rng(3)
    half = SPEED_TRIALS // 2
    xs = np.r_[bernoulli(rng, STEP[0], half), bernoulli(rng, STEP[1], half)]
    values = xs.tolist()
    params = river_defaults(name)
    want = river_fired(RIVER[name](**params), values)
    ours = OURS[name]
    assert ours(**params).update_many(xs).tolist() == want, f"{name} differs from River"
    assert ours_one_by_one(ours(**params), values) == want
    sides: dict[str, Callable[[], object]] = {
        "many": lambda: ours(**params).update_many(xs),
        "one": lambda: ours_one_by_one(ours(**params), values),
        "river": lambda: river_fired(RIVER[name](**params), values),
    }
    times: dict[str, list[float]] = {side: [] for side in sides}
    for r in range(rounds):
        for side in list(sides)[:: 1 if r % 2 == 0 else -1]:
            start = time.perf_counter()
            sides[side]()
            times[side].append(time.perf_counter() - start)
    for side, got in times.items():
        per = min(got) / SPEED_TRIALS * 1e9
        spread = (max(got) - min(got)) / max(got)
        print(f"{name}_{side}_ns_per_trial: {per:.1f} [rounds spread {spread:.0%}]")
    print(f"{name}_update_vs_river: {min(times['river']) / min(times['one']):.2f}")
    ratio = min(times["river"]) / min(times["many"])
    print(f"{name}_speed_vs_river: {ratio:.2f}")
    return ratio


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few streams, two rounds")
    args = parser.parse_args(argv)
    streams, delay_streams, rounds = (5, 20, 2) if args.quick else (100, 200, ROUNDS)
    targets: dict[str, tuple[str, float]] = {}
    for name in OURS:
        targets[f"{name}_false_alarms_per_100k"] = ("<=", 0.0)
        for before in BEFORE:
            targets[f"{name}_delay_max_after_{before}"] = ("<=", STEP_DELAY[OURS[name].kind])
            targets[f"{name}_delay_missed_after_{before}"] = ("<=", 0.0)
    for name, make in settings().items():
        alarms, trials = false_alarms(make, streams)
        print(f"{name}_stationary_trials: {trials:,}")
        print(target_line(f"{name}_false_alarms_per_100k", alarms / trials * N, targets))
        for before in BEFORE:
            got = delays(make, before, delay_streams)
            for what, value in got.items():
                print(target_line(f"{name}_delay_{what}_after_{before}", value, targets))
    ratios = [speed(name, rounds) for name in OURS]
    print(f"drift_speed_vs_river: {min(ratios):.2f}")


if __name__ == "__main__":
    with recorded(
        "drift",
        information=["*_false_alarms_per_100k", "*_delay_median_*", "*_vs_river"],
    ):
        main()
