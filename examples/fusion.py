"""Live fusion of deployed classifiers through the Committee service.

Five ordinary scikit-learn classifiers are trained on a third of the handwritten digits
that ship with scikit-learn (nothing is downloaded); they stand for the classifiers a
company already runs. The remaining digits arrive one by one: every classifier posts its
per-label probabilities as a sub-expert, the service predicts, and the true label follows.
The fused model learns on-line whom to trust. Printed: each classifier's error on the
stream, the best single one, a fixed average of their probabilities, and the fusion's
on-line error (every mistake counted, from the first trial on).

With ``--live-changes``, the model changes while it serves: half-way through the stream a
sixth classifier (a random forest) joins and the weakest (which sees only the top rows of
pixels) is retired. Printed beside the live model: a model re-created from scratch at
that point with the five classifiers then deployed.

Run the service (``./run start``), then ``python examples/fusion.py [--url URL]``.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Sequence

import numpy as np
from sklearn.datasets import load_digits
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.tree import DecisionTreeClassifier

from committee_client import Client

LEARNERS = {
    "vr-combine": {"kind": "vr-combine"},
    "committee": {"kind": "committee", "alpha": 1.5},
    "weighted-majority": {"kind": "weighted-majority", "beta": 0.5},
}


def deployed_classifiers(seed: int) -> dict[str, object]:
    """Classifiers of uneven quality, some seeing only part of the image."""
    top = FunctionTransformer(lambda x: x[:, :24])  # the top three rows of pixels
    return {
        "logistic": LogisticRegression(max_iter=2000),
        "naive-bayes": GaussianNB(),
        "knn": KNeighborsClassifier(n_neighbors=5),
        "tree": DecisionTreeClassifier(max_depth=6, random_state=seed),
        "top-rows-logistic": make_pipeline(top, LogisticRegression(max_iter=2000)),
    }


def streamed(
    classifiers: dict[str, object], seed: int
) -> tuple[dict[str, np.ndarray], np.ndarray, list[int]]:
    """Each classifier trained on a third of the digits, with its probabilities for every
    digit of the rest (the stream); the stream's labels; the labels."""
    digits = load_digits()
    x_fit, x_stream, y_fit, y_stream = train_test_split(
        digits.data, digits.target, train_size=1 / 3, random_state=seed, stratify=digits.target
    )
    probs = {}
    for clf_name, clf in classifiers.items():
        clf.fit(x_fit, y_fit)  # type: ignore[attr-defined]
        probs[clf_name] = clf.predict_proba(x_stream)  # type: ignore[attr-defined]
    return probs, y_stream, [int(c) for c in digits.target_names]


def votes(probs: dict[str, np.ndarray], t: int) -> dict[str, object]:
    """What the classifiers post for digit ``t``: each one's probabilities."""
    return {"experts": {n: [round(float(v), 6) for v in p[t]] for n, p in probs.items()}}


def run(
    url: str, seed: int = 0, learner: str = "vr-combine", name: str | None = None
) -> dict[str, float]:
    """Train, stream, and return every on-line error rate by name."""
    classifiers = deployed_classifiers(seed)
    probs, y_stream, labels = streamed(classifiers, seed)
    name = name or f"digits-{uuid.uuid4().hex[:8]}"
    errors = {n: float(np.mean(p.argmax(axis=1) != y_stream)) for n, p in probs.items()}
    errors["fixed average"] = float(
        np.mean(np.mean(list(probs.values()), axis=0).argmax(axis=1) != y_stream)
    )
    with Client(url) as service:
        service.create_model(
            name,
            labels=labels,
            experts={"expert_names": list(classifiers), "normalize": "sum-to-one"},
            learner=LEARNERS[learner],
        )
        trials = [(votes(probs, t), int(y)) for t, y in enumerate(y_stream)]
        # The first trial goes the way a live application's do: predict now, label later.
        prediction = service.predict(name, trials[0][0])
        mistakes = service.label(name, prediction.trial_id or "", trials[0][1]).mistake
        # The rest, whose labels this replay knows already, go through the WebSocket as
        # learn requests: each is predicted by the model as it stands, then learned, so
        # the mistakes counted are the same as with predict and label.
        with service.stream(name) as stream:
            mistakes += sum(item.unwrap().mistake for item in stream.learn_many(trials[1:]))
        errors["fusion (on-line)"] = mistakes / len(y_stream)
        weights = service.stats(name).experts or {}
    errors["_trials"] = len(y_stream)
    for expert, w in weights.items():
        errors[f"_weight {expert.removeprefix('expert:')}"] = w
    return errors


JOINS, LEAVES = "forest", "top-rows-logistic"


def live_changes(url: str, seed: int = 0, learner: str = "committee") -> dict[str, float]:
    """The live model's on-line error on each half of the stream, a classifier joining
    and another leaving between them, and the second-half error of a model re-created
    from scratch there with the classifiers then deployed."""
    classifiers = {**deployed_classifiers(seed), JOINS: RandomForestClassifier(random_state=seed)}
    probs, y_stream, labels = streamed(classifiers, seed)
    before = [n for n in classifiers if n != JOINS]
    after = [n for n in classifiers if n != LEAVES]
    half = len(y_stream) // 2
    live, fresh = f"live-{uuid.uuid4().hex[:8]}", f"fresh-{uuid.uuid4().hex[:8]}"

    def trials(names: list[str], span: range) -> list[tuple[dict[str, object], int]]:
        posted = {n: probs[n] for n in names}
        return [(votes(posted, t), int(y_stream[t])) for t in span]

    def mistakes(service: Client, name: str, items: list[tuple[dict[str, object], int]]) -> int:
        with service.stream(name) as stream:
            return sum(item.unwrap().mistake for item in stream.learn_many(items))

    experts = {"normalize": "sum-to-one"}
    with Client(url) as service:
        service.create_model(
            live,
            labels=labels,
            learner=LEARNERS[learner],
            experts={"expert_names": before, **experts},
        )
        first = mistakes(service, live, trials(before, range(half)))
        service.change_experts(live, add=[JOINS], retire=[LEAVES])
        service.create_model(
            fresh,
            labels=labels,
            learner=LEARNERS[learner],
            experts={"expert_names": after, **experts},
        )
        rest = trials(after, range(half, len(y_stream)))
        second, recreated = mistakes(service, live, rest), mistakes(service, fresh, rest)
    return {
        "live, first half": first / half,
        "live, second half": second / len(rest),
        "re-created, second half": recreated / len(rest),
        f"{JOINS} alone, second half": float(
            np.mean(probs[JOINS][half:].argmax(axis=1) != y_stream[half:])
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--learner", choices=list(LEARNERS), default=None)
    parser.add_argument(
        "--live-changes",
        action="store_true",
        help=f"{JOINS} joins half-way and {LEAVES} leaves (committee by default)",
    )
    args = parser.parse_args(argv)
    if args.live_changes:
        learner = args.learner or "committee"
        print(
            f"on-line error rates, fusing with {learner}; half-way {JOINS} joins, {LEAVES} leaves"
        )
        for k, v in live_changes(args.url, args.seed, learner).items():
            print(f"  {k:<26} {v:.4f}")
        return 0
    args.learner = args.learner or "vr-combine"
    errors = run(args.url, args.seed, args.learner)
    n = int(errors.pop("_trials"))
    weights = {k.removeprefix("_weight "): errors.pop(k) for k in list(errors) if k[0] == "_"}
    singles = {k: v for k, v in errors.items() if k not in ("fixed average", "fusion (on-line)")}
    best = min(singles, key=singles.__getitem__)
    print(f"error rates on {n} streamed digits, fusing with {args.learner}")
    for k, v in singles.items():
        weight = f"   fusion weight {weights[k]:.3f}" if k in weights else ""
        print(f"  {k:<20} {v:.4f}{weight}")
    print(f"  {'best single (' + best + ')':<20} {singles[best]:.4f}")
    print(f"  {'fixed average':<20} {errors['fixed average']:.4f}")
    print(f"  {'fusion (on-line)':<20} {errors['fusion (on-line)']:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
