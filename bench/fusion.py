"""The quality of live fusion through the service: on-line error against the best single
classifier, a fixed average, a per-window oracle and River's on-line combiners.

Data, nothing downloaded: scikit-learn's ``load_digits`` (one split), ``load_breast_cancer``
(``BREAST_SPLITS`` stratified splits, pooled: one split has too few mistakes to compare) and
a synthetic stream made with the seed, whose best classifier drifts: three regimes, one
after another in the stream, each on its own block of features (a linear rule, which
favours logistic regression; labelled prototypes, which favour the neighbours; axis-aligned
thresholds, which favour the trees). On each split, 30% trains five classifiers (Gaussian
naive Bayes, logistic regression, 5 nearest neighbours, a depth-3 tree, a random forest)
and an SVC; the other 70% is the stream. Seven experts post their per-label scores on
every trial: the five, a random one (a Dirichlet vector drawn each trial) and the SVC,
which breaks half-way through the stream: from there on its scores are moved to the next
class (class c's score becomes class c+1's).

The stream goes through the real service over REST (``committee`` served by uvicorn with
its own Redis, on free loopback ports; or ``--url``), one model per spec, feedback mode
and split, all at once (at most ``CONNECTIONS`` requests in flight), each in order:

``one_by_one``
    predict trial t, label it, then trial t+1 (single calls);
``pending_100``
    predict 100 trials (``predict/batch``: each served by the model as it stands), then
    their 100 labels in order (``label/batch``; one call each from the break until the
    broken expert's drop is seen, so that the weights are read between them), and so on.

Printed, as ``name: value`` lines, per data set: each expert's error (and on the last
half of the stream, from the break on), and three baselines on the same trials, in
hindsight: the best single expert of the seven, the fixed average (the argmax of the mean
of the five sound classifiers' probabilities) and the oracle switch (in each window of
``WINDOW`` trials, the expert with fewest mistakes there); per mode, the blind start: the
trials predicted before a split's first label comes (1 one by one, 100 with labels 100
behind) by the best in hindsight of three label-free rules (the mean, the median and the
vote of the seven), the rest by the best single expert, which is what a learner told
nothing about the experts could at best do. Per data set, mode and spec:
the on-line error (every mistake from the first trial) and the last half's;
``trials_to_drop_broken``, the labels after the break until the SVC holds under 1% of the
fusion weight (the sum of the weights of the sub-experts named after it alone,
``expert:svc`` and ``expert:svc/<normalisation>``, read from ``GET
/v1/models/{name}/stats`` once it describes the model's latest version, after each label
from the break until then; 0 when it held under 1% at the break, ``n/a`` for a learner
that shows no weights, ``>N`` when it still held more after the N labels polled; the mean
over splits); ``mistakes_following_broken``, trials after the break, predicted once a
label after the break had come, whose fused prediction is the SVC's top label and wrong
(for the best single classifier too: its count is what coincidence gives a learner that
ignores the SVC). Per data set and mode,
River's combiners run in-process on the same scores with the same feedback: ``river_softmax``
(``SoftmaxRegression`` on the concatenated score vectors) and ``river_bandit``
(``EpsilonGreedy`` choosing which expert to follow, reward 1 when its top label is right;
River's ``Exp3`` weighs a reward by the probability of the latest pull, not of the pull
it rewards, which labels 100 behind break).

The headline, last: ``fusion_vs_oracle_switch`` and ``fusion_vs_blind_start``
(information) and ``fusion_vs_best_single`` (target <= 1.05), each the worst over data
sets and modes of the ``fusion`` spec's error over the baseline's. A full run (not
``--quick``, all sets, modes and specs) rewrites the table of ``docs/fusion_results.rst``.

Run as ``python bench/fusion.py [--quick] [--sets ...] [--modes ...] [--specs ...]
[--seed S] [--url URL]``. ``--quick`` is a smoke run on short streams (``QUICK_DIGITS``,
``QUICK_BREAST`` of one breast_cancer split and ``QUICK_SYNTHETIC`` trials) that polls
at most ``QUICK_POLL_LABELS`` labels after the break.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import functools
import math
import sys
import tempfile
import time
import urllib.parse
import uuid
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from _results import recorded, rewrite_region
from _service_load import Connection
from river import bandit, linear_model, optim
from sklearn.calibration import CalibratedClassifierCV
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC
from sklearn.tree import DecisionTreeClassifier

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service import uvicorn

from models.learners.fusion import FUSION_INPUT
from storage.server import EmbeddedRedis

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "fusion_results.rst"

# The spec the headline judges.
FUSION: dict[str, Any] = {"input": {"experts": FUSION_INPUT}, "learner": {"kind": "fusion"}}
# Model configs; the bench fills in each one's ``expert_names``.
SPECS: dict[str, dict[str, Any]] = {
    "weighted-majority": {
        "input": {"experts": {"normalize": "sum-to-one"}},
        "learner": {"kind": "weighted-majority", "beta": 0.5},
    },
    "committee": {
        "input": {"experts": {"normalize": "sum-to-one"}},
        "learner": {"kind": "committee", "alpha": 1.5},
    },
    "vr-combine": {
        "input": {"experts": {"normalize": "sum-to-one"}},
        "learner": {"kind": "vr-combine"},
    },
    "vr-combine-robust": {
        "input": {"experts": {"normalize": "sum-to-one"}},
        "learner": {"kind": "vr-combine", "ties": "plain-sum", "signs": "nonnegative"},
    },
    # per-label trust: each classifier's vote split into one sub-expert per label
    "per-label": {
        "input": {"experts": {"normalize": "sum-to-one", "split_classes": "all"}},
        "learner": {"kind": "committee", "alpha": 1.5},
    },
    "fusion": FUSION,
}
SETS = ("digits", "breast_cancer", "synthetic")
MODES = ("one_by_one", "pending_100")
PENDING = 100  # trials predicted before their labels come, in pending_100
SOUND = ("naive-bayes", "logistic", "knn", "tree", "forest")
RANDOM, BROKEN = "random", "svc"
EXPERTS = (*SOUND, RANDOM, BROKEN)
TRAIN = 0.3
BREAST_SPLITS = 10
SYNTHETIC_TRIALS, SYNTHETIC_LABELS, SYNTHETIC_NOISE = 3_000, 6, 0.03
# --quick: trials of each data set (breast_cancer: the first of one split's)
QUICK_DIGITS, QUICK_BREAST, QUICK_SYNTHETIC = 150, 200, 300
WINDOW = 500  # trials per window of the oracle switch
DROPPED = 0.01  # the broken expert's share of the weight counted as dropped
POLL_LABELS, QUICK_POLL_LABELS = 100, 10  # labels after the break polled at most
# seconds before the first read of the statistics after a label, and between reads
# waiting for the summary (a worker writes a model's summary at most every 0.5 s)
POLL_FIRST, POLL_EVERY = 0.3, 0.1
RIVER_SGD = 0.1  # SoftmaxRegression's learning rate
BANDIT_EPSILON = 0.1
HEADLINE_TARGET = 1.05
CONNECTIONS = 8
# seconds the service keeps an idle connection open: the client's connections, taken in
# turn, are never idle that long, so the service never closes one just as it is reused
KEEP_ALIVE = "120"


# -- the streams --------------------------------------------------------------------------


@dataclass
class Stream:
    """One split's stream: each expert's scores for every trial, the labels (as class
    indices) and the first trial on which the broken expert is broken."""

    scores: dict[str, np.ndarray]  # expert -> (trials, k)
    y: np.ndarray
    broken_from: int

    def __len__(self) -> int:
        return len(self.y)

    @functools.cached_property
    def instances(self) -> list[bytes]:
        """Each trial's instance as JSON: every expert's scores, as lists in label order."""
        listed = {e: v.tolist() for e, v in self.scores.items()}
        return [
            orjson.dumps({"experts": {e: listed[e][t] for e in EXPERTS}}) for t in range(len(self))
        ]

    def top(self, expert: str) -> np.ndarray:
        return np.asarray(self.scores[expert].argmax(axis=1))


@dataclass
class DataSet:
    name: str
    labels: list[str]
    streams: list[Stream]  # one per split, pooled


def classifiers(seed: int) -> dict[str, Any]:
    """The five sound classifiers and the one that breaks, untrained."""
    return {
        "naive-bayes": GaussianNB(),
        "logistic": make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)),
        "knn": make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=5)),
        "tree": DecisionTreeClassifier(max_depth=3, random_state=seed),
        "forest": RandomForestClassifier(random_state=seed),
        BROKEN: make_pipeline(
            StandardScaler(), CalibratedClassifierCV(SVC(random_state=seed), ensemble=False)
        ),
    }


def experts_stream(
    x: np.ndarray,
    y: np.ndarray,
    k: int,
    seed: int,
    order: np.ndarray | None = None,
    trials: int | None = None,
) -> Stream:
    """Train the classifiers on 30% of ``(x, y)`` (stratified), and score the rest: the
    stream, sorted by ``order`` (a value per instance) if given, its first ``trials``
    (all if None); the broken expert breaks half-way through it."""
    x_fit, x_stream, y_fit, y_stream, _, o_stream = train_test_split(
        x,
        y,
        np.zeros(len(y)) if order is None else order,
        train_size=TRAIN,
        random_state=seed,
        stratify=y,
    )
    if order is not None:
        keep = np.argsort(o_stream, kind="stable")
        x_stream, y_stream = x_stream[keep], y_stream[keep]
    x_stream, y_stream = x_stream[:trials], y_stream[:trials]
    n = len(y_stream)
    scores: dict[str, np.ndarray] = {}
    for name, clf in classifiers(seed).items():
        clf.fit(x_fit, y_fit)
        p = np.zeros((n, k))
        p[:, clf.classes_] = clf.predict_proba(x_stream)
        scores[name] = p
    broken_from = n // 2
    scores[BROKEN][broken_from:] = np.roll(scores[BROKEN][broken_from:], 1, axis=1)
    scores[RANDOM] = np.random.default_rng([seed, 1]).dirichlet(np.ones(k), size=n)
    # as posted: six decimal places
    rounded = {e: np.round(scores[e], 6) for e in EXPERTS}
    return Stream(rounded, np.asarray(y_stream), broken_from)


def synthetic(
    trials: int, k: int, seed: int, block: int = 4
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Instances, labels and regimes (0, 1, 2): each regime's instances are standard
    normal on a block of features of their own, zero elsewhere; the label is a noisy
    linear rule (regime 0), the owner of the nearest of ``3k`` labelled prototypes (1), or
    thresholds on two features (2); ``SYNTHETIC_NOISE`` of labels replaced at random."""
    rng = np.random.default_rng(seed)
    n = int(np.ceil(trials / (1 - TRAIN)))
    regime = rng.integers(3, size=n)
    z = rng.standard_normal((n, block))
    y = np.empty(n, dtype=np.int64)
    m = regime == 0
    w = 2 * rng.standard_normal((block, k))
    y[m] = np.argmax(z[m] @ w + 0.5 * rng.gumbel(size=(int(m.sum()), k)), axis=1)
    m = regime == 1
    prototypes = 1.2 * rng.standard_normal((3 * k, block))
    nearest = ((z[m, None, :] - prototypes[None]) ** 2).sum(axis=2).argmin(axis=1)
    y[m] = nearest % k
    m = regime == 2
    y[m] = (np.digitize(z[m, 0], [-0.8, 0.0, 0.8]) + 4 * (z[m, 1] > 0.3)) % k
    noisy = rng.random(n) < SYNTHETIC_NOISE
    y[noisy] = rng.integers(k, size=int(noisy.sum()))
    x = np.zeros((n, 3 * block))
    for r in range(3):
        x[regime == r, r * block : (r + 1) * block] = z[regime == r]
    return x, y, regime


def data_set(name: str, seed: int, quick: bool) -> DataSet:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a class too rare for a fold
        if name == "digits":
            d = load_digits()
            trials = QUICK_DIGITS if quick else None
            stream = experts_stream(d.data, d.target, 10, seed, trials=trials)
            return DataSet(name, [str(c) for c in d.target_names], [stream])
        if name == "breast_cancer":
            d = load_breast_cancer()
            splits, trials = (1, QUICK_BREAST) if quick else (BREAST_SPLITS, None)
            streams = [
                experts_stream(d.data, d.target, 2, seed + i, trials=trials) for i in range(splits)
            ]
            return DataSet(name, [str(c) for c in d.target_names], streams)
        if name == "synthetic":
            trials = QUICK_SYNTHETIC if quick else SYNTHETIC_TRIALS
            x, y, regime = synthetic(trials, SYNTHETIC_LABELS, seed)
            stream = experts_stream(x, y, SYNTHETIC_LABELS, seed, order=regime, trials=trials)
            return DataSet(name, [str(c) for c in range(SYNTHETIC_LABELS)], [stream])
    raise ValueError(f"data set must be one of {SETS}, got {name!r}")


def batches(n: int, mode: str) -> Iterator[range]:
    """The trials whose predictions come before their labels, in turn."""
    size = 1 if mode == "one_by_one" else PENDING
    for start in range(0, n, size):
        yield range(start, min(n, start + size))


# -- the baselines, in hindsight ----------------------------------------------------------


def wrong(ds: DataSet, predict: Any) -> tuple[np.ndarray, np.ndarray]:
    """Over the pooled splits: whether ``predict(stream)`` was wrong on each trial, and
    whether the trial is in the last half of its split (from the break on)."""
    miss, late = [], []
    for s in ds.streams:
        miss.append(np.asarray(predict(s)) != s.y)
        late.append(np.arange(len(s)) >= s.broken_from)
    return np.concatenate(miss), np.concatenate(late)


def oracle_switch(s: Stream) -> np.ndarray:
    """In each window, the top label of the expert with fewest mistakes there."""
    out = np.empty(len(s), dtype=np.int64)
    for a in range(0, len(s), WINDOW):
        span = slice(a, a + WINDOW)
        best = min(EXPERTS, key=lambda e: int(np.sum(s.top(e)[span] != s.y[span])))
        out[span] = s.top(best)[span]
    return out


def fixed_average(s: Stream) -> np.ndarray:
    return np.asarray(np.mean([s.scores[e] for e in SOUND], axis=0).argmax(axis=1))


def label_free(s: Stream) -> dict[str, np.ndarray]:
    """The predictions of rules that need no label and treat the seven experts alike:
    the argmax of the mean of their scores, of the median, and of their top-label votes."""
    stacked = np.stack([s.scores[e] for e in EXPERTS])
    votes = np.stack([np.eye(stacked.shape[2])[s.top(e)] for e in EXPERTS])
    return {
        "mean": stacked.mean(axis=0).argmax(axis=1),
        "median": np.median(stacked, axis=0).argmax(axis=1),
        "vote": votes.sum(axis=0).argmax(axis=1),
    }


def blind(mode: str) -> int:
    """How many trials of a stream are predicted before its first label comes."""
    return 1 if mode == "one_by_one" else PENDING


def blind_start(ds: DataSet, mode: str, best: str) -> tuple[np.ndarray, str]:
    """What a learner told nothing of the experts could at best do, in hindsight: the
    trials predicted before the first label by the label-free rule with the fewest
    mistakes there (pooled over the splits), every later trial by the best single expert.
    A learner that treats the experts alike cannot know the best one before a label, so
    its blind trials cost at least what such rules cost; the rule is also chosen in
    hindsight. Returns each trial's mistake and the rule's name."""
    n = blind(mode)
    rules = [label_free(s) for s in ds.streams]
    pairs = list(zip(rules, ds.streams, strict=True))
    rule = min(rules[0], key=lambda r: sum(int(np.sum(f[r][:n] != s.y[:n])) for f, s in pairs))
    miss = []
    for f, s in pairs:
        pred = s.top(best).copy()
        pred[:n] = f[rule][:n]
        miss.append(pred != s.y)
    return np.concatenate(miss), rule


# -- River's combiners, in-process --------------------------------------------------------


def river_run(s: Stream, mode: str, combiner: str, seed: int) -> np.ndarray:
    """The predictions of a River combiner fed as the service is in ``mode``."""
    k = s.scores[EXPERTS[0]].shape[1]
    preds = np.empty(len(s), dtype=np.int64)
    xs = [
        {f"{e}:{c}": float(s.scores[e][t, c]) for e in EXPERTS for c in range(k)}
        for t in range(len(s))
    ]
    tops = {e: s.top(e) for e in EXPERTS}
    softmax = linear_model.SoftmaxRegression(optimizer=optim.SGD(RIVER_SGD))
    policy = bandit.EpsilonGreedy(epsilon=BANDIT_EPSILON, seed=seed)
    chosen: dict[int, str] = {}
    for span in batches(len(s), mode):
        for t in span:
            if combiner == "river_softmax":
                proba = softmax.predict_proba_one(xs[t])
                preds[t] = max(proba, key=proba.__getitem__) if proba else 0
            else:
                chosen[t] = str(policy.pull(list(EXPERTS)))
                preds[t] = tops[chosen[t]][t]
        for t in span:
            label = int(s.y[t])
            if combiner == "river_softmax":
                softmax.learn_one(xs[t], label)
            else:
                arm = chosen.pop(t)
                policy.update(arm, float(tops[arm][t] == label))
    return preds


RIVER = ("river_softmax", "river_bandit")


# -- the service --------------------------------------------------------------------------


class ServiceError(RuntimeError):
    pass


class Client:
    """``CONNECTIONS`` keep-alive HTTP/1.1 connections to the service at ``url``
    (``http://host:port``), each request waiting for a free one. Pre-built request heads
    and a read of exactly ``content-length`` bytes keep the client's own CPU small beside
    the service's, which shares the machine."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the service's URL must be http://host[:port], got {url!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        self.idle: asyncio.Queue[Connection | None] = asyncio.Queue()
        for _ in range(CONNECTIONS):
            self.idle.put_nowait(None)  # opened when first taken

    async def request(self, method: str, path: str, body: bytes | None = None) -> Answer:
        connection = await self.idle.get()
        try:
            if connection is not None:
                try:
                    return Answer(*await connection.request(method, path, body))
                except (ConnectionError, asyncio.IncompleteReadError):
                    # the service closed it (an idle connection past its keep-alive): the
                    # request is sent again once on a new one; the service's writes are
                    # safe to repeat
                    await connection.__aexit__()
                    connection = None
            connection = await Connection(self.port, {}, host=self.host).__aenter__()
            return Answer(*await connection.request(method, path, body))
        finally:
            self.idle.put_nowait(connection)

    async def close(self) -> None:
        while not self.idle.empty():
            connection = self.idle.get_nowait()
            if connection is not None:
                await connection.__aexit__()


@dataclass
class Answer:
    status: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")


async def call(http: Client, path: str, body: bytes) -> Any:
    r = await http.request("POST", path, body)
    if r.status not in (200, 201):
        raise ServiceError(f"POST {path}: {r.status} {r.text[:500]}")
    return orjson.loads(r.content)


def broken_share(experts: dict[str, float]) -> float:
    """The broken expert's share of the total weight: the sub-experts named after it
    alone (``expert:svc``, ``expert:svc/<normalisation>``, ``expert:svc@label:<label>``)."""
    total = sum(abs(w) for w in experts.values())
    mine = sum(
        abs(w)
        for name, w in experts.items()
        if name == f"expert:{BROKEN}" or name.startswith((f"expert:{BROKEN}/", f"expert:{BROKEN}@"))
    )
    return mine / total if total > 0 else 0.0


async def current_share(http: Client, name: str) -> float | None:
    """The broken expert's share of the weight once the model's summary describes its
    latest version (None: the learner shows no weights)."""
    await asyncio.sleep(POLL_FIRST)
    while True:
        r = await http.request("GET", f"/v1/models/{name}/stats")
        if r.status != 200:
            raise ServiceError(f"GET /v1/models/{name}/stats: {r.status} {r.text[:500]}")
        doc = orjson.loads(r.content)
        if doc["summary_version"] >= doc["version"]:
            experts = doc["experts"]
            return None if experts is None else broken_share(experts)
        await asyncio.sleep(POLL_EVERY)


@dataclass
class Run:
    """What the service did on one stream: its predictions, and the labels after the break
    until the broken expert held under ``DROPPED`` of the weight (None: it shows no
    weights; more than ``polled``: not within the ``polled`` labels polled)."""

    preds: np.ndarray
    drop: int | None
    polled: int


async def serve(
    http: Client,
    name: str,
    spec: dict[str, Any],
    labels: list[str],
    s: Stream,
    mode: str,
    poll_labels: int,
) -> Run:
    """Create model ``name`` and stream ``s`` through it in ``mode``."""
    config = copy.deepcopy(spec)
    config["input"]["experts"]["expert_names"] = list(EXPERTS)
    await call(http, "/v1/models", orjson.dumps({"name": name, "labels": labels, **config}))
    base = f"/v1/models/{name}"
    instances = s.instances
    index = {label: c for c, label in enumerate(labels)}
    preds = np.empty(len(s), dtype=np.int64)
    drop: int | None = poll_labels + 1
    polling = True  # until the drop is seen, or the learner shows no weights
    after = 0  # labels of trials after the break sent so far

    async def poll() -> None:
        nonlocal polling, drop
        share = await current_share(http, name)
        if share is None:
            polling, drop = False, None
        elif share < DROPPED:
            polling, drop = False, after
        elif after >= poll_labels:
            polling = False

    def label_body(t: int) -> bytes:
        return b'{"trial_id":"t%d","label":%s}' % (t, orjson.dumps(labels[int(s.y[t])]))

    for span in batches(len(s), mode):
        if len(span) == 1:
            t = span[0]
            got = await call(
                http, f"{base}/predict", b'{"trial_id":"t%d","instance":%s}' % (t, instances[t])
            )
            preds[t] = index[str(got["label"])]
        else:
            items = b",".join(b'{"trial_id":"t%d","instance":%s}' % (t, instances[t]) for t in span)
            got = await call(http, f"{base}/predict/batch", b'{"items":[%s]}' % items)
            for t, item in zip(span, got["items"], strict=True):
                if item["error"] is not None:
                    raise ServiceError(f"{name}: trial {t}: {item['error']}")
                preds[t] = index[str(item["result"]["label"])]
        together: list[int] = []  # labels sent in one call
        for t in span:
            if polling and t >= s.broken_from:
                if together:
                    await send_labels(http, base, [label_body(u) for u in together])
                    together = []
                if after == 0:
                    await poll()  # at the break
                if polling:
                    await call(http, f"{base}/label", label_body(t))
                    after += 1
                    await poll()
                    continue
            together.append(t)
        if together:
            await send_labels(http, base, [label_body(u) for u in together])
    return Run(preds, drop, poll_labels)


async def send_labels(http: Client, base: str, bodies: list[bytes]) -> None:
    if len(bodies) == 1:
        await call(http, f"{base}/label", bodies[0])
        return
    got = await call(http, f"{base}/label/batch", b'{"items":[%s]}' % b",".join(bodies))
    errors = [item["error"] for item in got["items"] if item["error"] is not None]
    if errors:
        raise ServiceError(f"{base}: {errors[0]}")


Runs = dict[tuple[str, str], list[Run]]  # (spec, mode) -> a run per split


async def serve_all(
    url: str, sets: list[DataSet], specs: list[str], modes: list[str], poll_labels: int
) -> dict[str, Runs]:
    """Every spec in every mode on every split of every data set, all concurrently, by
    data set; the models are deleted afterwards."""
    prefix = f"fusion-{uuid.uuid4().hex[:6]}"
    jobs = {
        (ds.name, spec, mode, i): f"{prefix}-{ds.name}-{i}-{spec}-{mode}".replace("_", "-")
        for ds in sets
        for spec in specs
        for mode in modes
        for i in range(len(ds.streams))
    }
    by_name = {ds.name: ds for ds in sets}
    http = Client(url)
    try:
        runs = await asyncio.gather(
            *(
                serve(
                    http,
                    name,
                    SPECS[spec],
                    by_name[set_name].labels,
                    by_name[set_name].streams[i],
                    mode,
                    poll_labels,
                )
                for (set_name, spec, mode, i), name in jobs.items()
            )
        )
    finally:
        for name in jobs.values():
            await http.request("DELETE", f"/v1/models/{name}")
        await http.close()
    out: dict[str, Runs] = {ds.name: {} for ds in sets}
    for (set_name, spec, mode, _), run in zip(jobs, runs, strict=True):
        out[set_name].setdefault((spec, mode), []).append(run)
    return out


# -- figures ------------------------------------------------------------------------------


def rate(miss: np.ndarray) -> float:
    return float(np.mean(miss)) if miss.size else float("nan")


def ratio(error: float, baseline: float) -> float:
    """``error / baseline``; a baseline without mistakes is matched only without any."""
    if baseline > 0:
        return error / baseline
    return math.inf if error > 0 else 1.0


def drop_text(runs: list[Run]) -> str:
    """The labels to drop the broken expert, the mean over splits."""
    drops = [r.drop for r in runs if r.drop is not None]
    if len(drops) < len(runs):
        return "n/a"
    if any(r.drop is not None and r.drop > r.polled for r in runs):
        return f">{runs[0].polled}"
    return f"{np.mean(drops):.1f}"


def following_broken(ds: DataSet, preds: list[np.ndarray], mode: str) -> int:
    """Trials after the break, over the streams, whose prediction in ``preds`` is wrong
    and is the broken expert's top label, among those predicted once a label of a trial
    after the break had come in ``mode`` (before it, nothing could tell the expert broke)."""
    size = 1 if mode == "one_by_one" else PENDING
    out = 0
    for p, s in zip(preds, ds.streams, strict=True):
        batch_start = np.arange(len(s)) // size * size  # the labels come before it
        told = batch_start > s.broken_from
        out += int(np.sum((p == s.top(BROKEN)) & (p != s.y) & told))
    return out


@dataclass
class Figures:
    """One data set's printed figures, by line name (without the data set's prefix)."""

    values: dict[str, str]
    # mode -> the fusion's error over the best single's, the oracle's, the blind start's
    ratios: dict[str, tuple[float, float, float]]


def measure(
    ds: DataSet,
    runs: dict[tuple[str, str], list[Run]],
    modes: list[str],
    specs: list[str],
    seed: int,
) -> Figures:
    v: dict[str, str] = {"trials": str(sum(len(s) for s in ds.streams))}
    singles = {}
    for e in EXPERTS:
        miss, late = wrong(ds, lambda s, e=e: s.top(e))
        singles[e] = rate(miss)
        v[f"expert.{e}.error"] = f"{rate(miss):.4f}"
        v[f"expert.{e}.error_last_half"] = f"{rate(miss[late]):.4f}"
    best = min(EXPERTS, key=singles.__getitem__)
    v["best_single.error"] = f"{singles[best]:.4f} ({best})"
    # the best single's own mistakes that fall on the broken expert's label: what a
    # learner that ignores the broken expert still counts as following it, by coincidence
    v["best_single.mistakes_following_broken"] = str(
        following_broken(ds, [s.top(best) for s in ds.streams], "one_by_one")
    )
    average = rate(wrong(ds, fixed_average)[0])
    v["fixed_average.error"] = f"{average:.4f}"
    oracle = rate(wrong(ds, oracle_switch)[0])
    v[f"oracle_switch_{WINDOW}.error"] = f"{oracle:.4f}"
    ratios = {}
    for mode in modes:
        miss, rule = blind_start(ds, mode, best)
        v[f"{mode}.blind_start.error"] = f"{rate(miss):.4f} ({rule} on the first {blind(mode)})"
        floor = rate(miss)
        for spec in specs:
            got = runs[spec, mode]
            preds = iter([r.preds for r in got])
            miss, late = wrong(ds, lambda s, preds=preds: next(preds))
            v[f"{mode}.{spec}.error"] = f"{rate(miss):.4f}"
            v[f"{mode}.{spec}.error_last_half"] = f"{rate(miss[late]):.4f}"
            v[f"{mode}.{spec}.trials_to_drop_broken"] = drop_text(got)
            following = following_broken(ds, [r.preds for r in got], mode)
            v[f"{mode}.{spec}.mistakes_following_broken"] = str(following)
            if spec == "fusion":
                ratios[mode] = (
                    ratio(rate(miss), singles[best]),
                    ratio(rate(miss), oracle),
                    ratio(rate(miss), floor),
                )
        for combiner in RIVER:
            miss, late = wrong(ds, lambda s, c=combiner, m=mode: river_run(s, m, c, seed))
            v[f"{mode}.{combiner}.error"] = f"{rate(miss):.4f}"
            v[f"{mode}.{combiner}.error_last_half"] = f"{rate(miss[late]):.4f}"
    return Figures(v, ratios)


def headline(name: str, ratios: dict[str, float], target: float | None) -> str:
    """The worst ratio over data sets and modes, where it was, and its target."""
    if not ratios:
        return f"{name}: n/a (the fusion spec was not run)"
    where = max(ratios, key=ratios.__getitem__)
    if target is None:
        note = "information"
    else:
        note = f"target <= {target:g}: {'met' if ratios[where] <= target else 'MISSED'}"
    return f"{name}: {ratios[where]:.3f} (worst: {where}; {note})"


# -- the results page ---------------------------------------------------------------------

BEGIN = ".. begin fusion results (rewritten by every full run of bench/fusion.py)"
END = ".. end fusion results"


def results_table(
    figures: dict[str, Figures], lines: list[str], command: str, seconds: float
) -> str:
    """The region of ``docs/fusion_results.rst`` a full run writes: one table."""
    rows: list[list[str]] = []
    for name, f in figures.items():
        v = f.values
        baselines = {
            "best single": v["best_single.error"],
            "fixed average": v["fixed_average.error"],
            f"oracle switch per {WINDOW}": v[f"oracle_switch_{WINDOW}.error"],
        }
        rows += [[name, "both", what, e, "", "", "", ""] for what, e in baselines.items()]
        rows[-3][6] = v["best_single.mistakes_following_broken"]
        broken = [v[f"expert.{BROKEN}.error"], v[f"expert.{BROKEN}.error_last_half"]]
        rows.append([name, "both", f"{BROKEN} (breaks)", *broken, "", "", ""])
        for mode in MODES:
            if f"{mode}.blind_start.error" in v:
                rows.append([name, mode, "blind start", v[f"{mode}.blind_start.error"]])
                rows[-1] += [""] * 4
            for spec in [*SPECS, *RIVER]:
                if f"{mode}.{spec}.error" not in v:
                    continue
                rows.append(
                    [
                        name,
                        mode,
                        spec,
                        v[f"{mode}.{spec}.error"],
                        v[f"{mode}.{spec}.error_last_half"],
                        v.get(f"{mode}.{spec}.trials_to_drop_broken", ""),
                        v.get(f"{mode}.{spec}.mistakes_following_broken", ""),
                        "",
                    ]
                )
    for text in lines:  # "name: value (worst: set.mode; target ...)"
        key, rest = text.split(": ", 1)
        value, note = rest.removesuffix(")").split(" (", 1)
        where, target = note.removeprefix("worst: ").split("; ", 1)
        worst_set, _, worst_mode = where.partition(".")
        target = target.removeprefix("target ")
        rows.append([f"worst: {worst_set}", worst_mode, key, value, "", "", "", target])
    header = [
        "data set",
        "feedback",
        "method",
        "error",
        "last half",
        "labels to drop the SVC",
        "mistakes following it",
        "target",
    ]
    out = [
        BEGIN,
        "",
        f"Latest run: {seconds / 60:.1f} minutes, ``{command}``.",
        "",
        ".. list-table::",
        "   :header-rows: 1",
        "",
    ]
    for row in [header, *rows]:
        cells = [f"- {cell}".rstrip() for cell in row]
        out.append(f"   * {cells[0]}")
        out.extend(f"     {cell}" for cell in cells[1:])
    out += ["", END]
    return "\n".join(out) + "\n"


def rewrite_results(region: str) -> None:
    """Put ``region`` in place of the marked one of the results page (at its end when the
    page has none)."""
    rewrite_region(RESULTS, BEGIN, END, region)


# -- main ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short streams, for the test")
    parser.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--specs", nargs="+", choices=list(SPECS), default=list(SPECS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--url", default=None, help="a running service (default: start one)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with ExitStack() as stack:
        # the classifiers train while the service starts
        pool = stack.enter_context(ThreadPoolExecutor(1))
        made = pool.submit(lambda: [data_set(n, args.seed, args.quick) for n in args.sets])
        url = args.url
        if url is None:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fusion-bench-")))
            redis = stack.enter_context(EmbeddedRedis(tmp / "redis"))
            env = {
                "COMMITTEE_REDIS_URL": redis.url,
                "COMMITTEE_KEY_PREFIX": "bench",
                "COMMITTEE_LOG_LEVEL": "warning",
            }
            target = ["app.http.main:create_app", "--factory", "--timeout-keep-alive", KEEP_ALIVE]
            server = uvicorn("service", target, env, tmp, lambda h: h.get("/readyz").is_success)
            url = stack.enter_context(server).url
        poll_labels = QUICK_POLL_LABELS if args.quick else POLL_LABELS
        sets = made.result()
        runs = asyncio.run(serve_all(url, sets, args.specs, args.modes, poll_labels))
    figures: dict[str, Figures] = {}
    for ds in sets:
        figures[ds.name] = measure(ds, runs[ds.name], args.modes, args.specs, args.seed)
        for key, value in figures[ds.name].values.items():
            print(f"{ds.name}.{key}: {value}")
    ratios = [
        {f"{name}.{mode}": r[i] for name, f in figures.items() for mode, r in f.ratios.items()}
        for i in (0, 1, 2)
    ]
    lines = [
        headline("fusion_vs_oracle_switch", ratios[1], None),
        headline("fusion_vs_blind_start", ratios[2], None),
        headline("fusion_vs_best_single", ratios[0], HEADLINE_TARGET),
    ]
    print(*lines, sep="\n")
    full = not args.quick and (args.sets, args.modes, args.specs) == (
        list(SETS),
        list(MODES),
        list(SPECS),
    )
    if full:
        command = " ".join(["python bench/fusion.py", *(argv or sys.argv[1:])])
        rewrite_results(results_table(figures, lines, command, time.monotonic() - started))


if __name__ == "__main__":
    with recorded("fusion", information=["fusion_vs_*"]):
        main()
