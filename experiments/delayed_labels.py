"""Fusing deployed classifiers with labels one by one and with labels 100 behind.

The measurement behind docs/delayed_labels.rst. 30% of scikit-learn's digits (one split)
or breast_cancer (10 stratified splits, pooled) trains five classifiers (naive Bayes,
logistic regression, kNN, a depth-3 tree, a random forest) and an SVC whose scores move
to the next class half-way through the stream (a classifier that silently breaks); a
seventh expert posts random (Dirichlet) scores. The other 70% is streamed: every expert
posts its per-label probabilities as a sub-expert (``normalize="sum-to-one"``), the model
predicts, and the labels arrive either one by one or in chunks of ``--pending``, the
predictions of a chunk all made before its labels arrive. Labels are learned in trial
order, as the service applies them, so the learner goes through the same states either
way; only the predictions served differ.

Printed per configuration and data set: the on-line error with labels one by one and
pending, their ratio, and the mistakes in four stretches (the first chunk, up to the
break, the chunk after the break, the rest). Needs scikit-learn (the ``examples`` extra).
Run as ``python -m experiments.delayed_labels``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits  # type: ignore[import-untyped]
from sklearn.ensemble import RandomForestClassifier  # type: ignore[import-untyped]
from sklearn.linear_model import LogisticRegression  # type: ignore[import-untyped]
from sklearn.model_selection import StratifiedShuffleSplit  # type: ignore[import-untyped]
from sklearn.naive_bayes import GaussianNB  # type: ignore[import-untyped]
from sklearn.neighbors import KNeighborsClassifier  # type: ignore[import-untyped]
from sklearn.svm import SVC  # type: ignore[import-untyped]
from sklearn.tree import DecisionTreeClassifier  # type: ignore[import-untyped]

from models.inputs.space import InputSpace
from models.registry import build

EXPERTS = ("naive-bayes", "logistic", "knn", "tree", "forest", "svc", "random")
BROKEN = EXPERTS.index("svc")
CONFIGS: dict[str, dict[str, Any]] = {
    "paper": {},
    "restarts off": {"restarts": False},
    "no recycling (u = 0)": {"max_updates": 0},
    "vote_normalize l1": {"vote_normalize": "l1"},
    "ties plain-sum": {"ties": "plain-sum"},
    "signs nonnegative": {"signs": "nonnegative"},
    "signs nonnegative, ties plain-sum": {"signs": "nonnegative", "ties": "plain-sum"},
}
DATA = {"digits": (load_digits, 1), "breast_cancer": (load_breast_cancer, 10)}


def stream(data: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Every expert's probabilities for every streamed instance (trials x experts x
    labels), and the labels."""
    d = DATA[data][0]()
    split = StratifiedShuffleSplit(1, train_size=0.3, random_state=seed)
    fit, rest = next(split.split(d.data, d.target))
    classifiers = [
        GaussianNB(),
        LogisticRegression(max_iter=5000),
        KNeighborsClassifier(),
        DecisionTreeClassifier(max_depth=3, random_state=seed),
        RandomForestClassifier(random_state=seed),
        SVC(probability=True, random_state=seed),
    ]
    with warnings.catch_warnings():  # SVC's probability=True is deprecated from 1.9
        warnings.simplefilter("ignore", FutureWarning)
        probs = [c.fit(d.data[fit], d.target[fit]).predict_proba(d.data[rest]) for c in classifiers]
    k, trials = probs[0].shape[1], len(rest)
    half = trials // 2
    probs[BROKEN][half:] = np.roll(probs[BROKEN][half:], 1, axis=1)
    probs.append(np.random.default_rng(seed).dirichlet(np.ones(k), size=trials))
    return np.round(np.stack(probs, axis=1), 6), d.target[rest].astype(int)


def mistakes(spec: dict[str, Any], p: np.ndarray, y: np.ndarray, pending: int) -> np.ndarray:
    """Which of the served predictions were wrong, labels arriving ``pending`` at a time."""
    labels = list(range(p.shape[2]))
    space = InputSpace(labels, experts={"expert_names": list(EXPERTS), "normalize": "sum-to-one"})
    xs = [
        space.encode({"experts": dict(zip(EXPERTS, t.tolist(), strict=True))}, "experts") for t in p
    ]
    learner = build(spec, labels=labels, size=space.size("experts"))
    wrong = np.zeros(len(y), dtype=bool)
    for start in range(0, len(y), pending):
        chunk = range(start, min(start + pending, len(y)))
        for t in chunk:
            wrong[t] = learner.predict(xs[t]) != y[t]
        for t in chunk:
            learner.learn(xs[t], int(y[t]))
    return wrong


def stretches(wrong: np.ndarray, pending: int) -> np.ndarray:
    """Mistakes in the first chunk, up to the break, in the chunk after it, after that."""
    half = len(wrong) // 2
    edges = [0, pending, half, half + pending, len(wrong)]
    return np.array([wrong[a:b].sum() for a, b in itertools.pairwise(edges)])


def measure(spec: dict[str, Any], data: str, splits: int, pending: int) -> dict[str, Any]:
    trials, counts = 0, {1: np.zeros(4, int), pending: np.zeros(4, int)}
    for seed in range(splits):
        p, y = stream(data, seed)
        trials += len(y)
        for lag in counts:
            counts[lag] += stretches(mistakes(spec, p, y, lag), pending)
    one, late = counts[1].sum() / trials, counts[pending].sum() / trials
    return {
        "trials": trials,
        "one_by_one": round(float(one), 4),
        "pending": round(float(late), 4),
        "ratio": round(float(late / one), 3),
        "stretches_one_by_one": counts[1].tolist(),
        "stretches_pending": counts[pending].tolist(),
    }


def singles(data: str, splits: int) -> dict[str, float]:
    """Each expert's error on the pooled streams."""
    wrong, trials = np.zeros(len(EXPERTS)), 0
    for seed in range(splits):
        p, y = stream(data, seed)
        wrong += (p.argmax(axis=2) != y[:, None]).sum(axis=0)
        trials += len(y)
    return {e: round(float(w / trials), 4) for e, w in zip(EXPERTS, wrong, strict=True)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, default=100)
    parser.add_argument("--config", action="append", choices=list(CONFIGS))
    parser.add_argument("--data", action="append", choices=list(DATA))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for data in args.data or list(DATA):
        splits = DATA[data][1]
        if not args.json:
            print(f"{data}: single experts' errors {singles(data, splits)}")
        for name in args.config or list(CONFIGS):
            spec = {"kind": "vr-combine", **CONFIGS[name]}
            row = {"data": data, "config": name, **measure(spec, data, splits, args.pending)}
            rows.append(row)
            if not args.json:
                print(
                    f"  {name:<36} one by one {row['one_by_one']:.4f}"
                    f"  {args.pending} pending {row['pending']:.4f}  ratio {row['ratio']:.2f}"
                    f"  stretches {row['stretches_one_by_one']} / {row['stretches_pending']}"
                )
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
