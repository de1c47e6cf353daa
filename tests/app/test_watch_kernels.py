"""The compiled paths of the drift and bound watches (:mod:`models.kernels.watch`) against
plain Python references, the arithmetic the watches had before they were compiled: the
top votes, Page-Hinkley over many streams at once, and the bound watch's counts, one trial
at a time and as runs."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from app.service.bound_watch import MAX_ALERTS as BOUND_ALERTS
from app.service.bound_watch import NAME as BOUND
from app.service.bound_watch import BoundWatch, rule_of
from app.service.drift_watch import DETECTOR, EXPERT_WATCH, RECENT, DriftWatch
from app.service.drift_watch import MAX_ALERTS as DRIFT_ALERTS
from app.service.monitor import top_votes
from models.core.instance import Experts
from models.drift import PageHinkley
from models.inputs.space import InputSpace
from models.kernels import watch
from models.kernels.weighted_majority import half_brier
from models.registry import build

Trial = tuple[Experts, int, int]

# -- references ---------------------------------------------------------------------------


def ref_top_votes(e: np.ndarray, c: np.ndarray, v: np.ndarray, size: int) -> tuple[Any, Any]:
    """Each sub-expert's highest vote, the lowest class of equals, by a sort."""
    if not e.size:
        return [], []
    order = np.lexsort((c, -v, e))
    e, c = e[order], c[order]
    first = np.flatnonzero(np.r_[True, e[1:] != e[:-1]])
    keep = e[first] < size
    return e[first][keep].tolist(), c[first][keep].tolist()


class RefStream:
    """A 0/1 mistake stream as the drift watch kept it: a detector object, Python ints."""

    def __init__(self, seqs: bool) -> None:
        self.detector = PageHinkley()
        self.trials = self.mistakes = self.ring = self.filled = 0
        self.seqs: deque[int] | None = deque(maxlen=RECENT) if seqs else None

    def step(self, seq: int, mistake: bool) -> dict[str, Any] | None:
        self.trials += 1
        self.mistakes += mistake
        self.ring = ((self.ring << 1) | mistake) & ((1 << RECENT) - 1)
        self.filled = min(self.filled + 1, RECENT)
        if self.seqs is not None:
            self.seqs.append(seq)
        if not self.detector.update(float(mistake)):
            return None
        recent = self.ring.bit_count()
        before, after = self.trials - self.filled, self.filled
        alert = {
            "seq": seq,
            "before": (self.mistakes - recent) / before if before else None,
            "after": recent / after if after else None,
            "since": self.seqs[0] if self.seqs else None,
            "trials": self.trials,
        }
        self.trials = self.mistakes = self.ring = self.filled = 0
        if self.seqs is not None:
            self.seqs.clear()
        return alert

    def export(self) -> dict[str, Any]:
        return {
            "detector": self.detector.export_state(),
            "trials": self.trials,
            "mistakes": self.mistakes,
            "recent": f"{self.ring:x}",
            "filled": self.filled,
            "seqs": None if self.seqs is None else list(self.seqs),
        }


def ref_drift(n: int, trials: list[Trial], first: int) -> tuple[list[Any], dict[str, Any]]:
    """The alerts and the streams' states of a drift watch over ``n`` sub-experts."""
    model = RefStream(seqs=True)
    experts = [RefStream(seqs=False) for _ in range(n)] if n <= EXPERT_WATCH else []
    alerts: list[dict[str, Any]] = []
    for seq, (x, y, served) in enumerate(trials, first):
        if (a := model.step(seq, served != y)) is not None:
            alerts.append({"kind": "drift", "what": "model", "detector": DETECTOR, **a})
        voters, tops = ref_top_votes(x.expert, x.cls, x.value, len(experts))
        for i, top in zip(voters, tops, strict=True):
            if (a := experts[i].step(seq, top != y)) is not None:
                alerts.append({"kind": "drift", "what": f"expert:e{i}", "detector": DETECTOR, **a})
    return alerts[-DRIFT_ALERTS:], {
        "model": model.export(),
        "experts": [s.export() for s in experts],
    }


def ref_bound(w: BoundWatch, seq: int, x: Experts, y: int, own: int) -> None:
    """One trial of the bound watch ``w``, its arithmetic in numpy as it was."""
    if w.since is None:
        w.since = seq
    if w.suspended is not None:
        w.trials += 1
        return
    n = w.offsets.size
    voters, tops = (np.array(a, dtype=np.int64) for a in ref_top_votes(x.expert, x.cls, x.value, n))
    why = None
    if voters.size != n or int(x.expert.max(initial=-1)) >= n:
        why = "a sub-expert did not vote"
    elif w.rule.one_hot and not (x.expert.size == n and (x.value == 1.0).all()):
        why = "a sub-expert's vote was not one label with 1"
    if why is not None:
        w.suspended = {"seq": seq, "why": why}
        w.trials += 1
        return
    wrong = tops != y
    w.mistakes += wrong
    loss = wrong.astype(np.float64)
    if w.rule.brier:
        scored = np.zeros(n)
        half_brier(x.expert, x.cls, x.value, y, scored)
        loss += w.rule.brier * scored
    w.losses += loss
    w.trials += 1
    w.own += own != y
    with np.errstate(invalid="ignore"):
        costs = w.offsets + np.where(w.losses > 0, w.losses * w.rule.per_loss, 0.0)
    best = int(np.argmin(costs))
    bound = (float(costs[best]) + w.trials * w.rule.per_trial) / w.rule.divisor
    if w.own <= bound * (1.0 + 1e-9) + 1e-9:
        w.over = False
        return
    if w.over:
        return
    w.over = True
    w.alerts.append(
        {
            "kind": "bound",
            "what": BOUND,
            "seq": seq,
            "since": w.since,
            "mistakes": w.own,
            "bound": bound,
            "best": w.names[best] if best < len(w.names) else str(best),
            "best_mistakes": int(w.mistakes[best]),
            "trials": w.trials,
        }
    )
    del w.alerts[:-BOUND_ALERTS]


# -- random trials ------------------------------------------------------------------------


def _votes(
    rng: np.random.Generator, n: int, k: int, y: int, wrong: np.ndarray, style: str, abstain: float
) -> tuple[list[int], list[int], list[float]]:
    """One trial's votes: each sub-expert's favourite is ``y`` unless ``wrong``; one-hot
    votes of 1, or a favourite of 1 beside other classes' 0.5 or 1 (ties), or none."""
    e: list[int] = []
    c: list[int] = []
    v: list[float] = []
    for i in range(n):
        if rng.random() < abstain:
            continue
        fav = int((y + rng.integers(1, k)) % k) if wrong[i] and k > 1 else y
        votes = {fav: 1.0}
        if style == "spread":
            for j in range(k):
                if j != fav and rng.random() < 0.5:
                    votes[j] = float(rng.choice([0.5, 1.0, 0.25]))
        for j in sorted(votes):
            e.append(i)
            c.append(j)
            v.append(votes[j])
    return e, c, v


def _trials(seed: int, n: int, k: int, length: int, style: str, abstain: float) -> list[Trial]:
    """Trials whose sub-experts' and model's error rates rise at a random point."""
    rng = np.random.default_rng(seed)
    change = int(rng.integers(0, length + 1))
    low, high = rng.uniform(0.0, 0.2, n + 1), rng.uniform(0.3, 0.9, n + 1)
    out = []
    for t in range(length):
        rate = low if t < change else high
        wrong = rng.random(n + 1) < rate
        y = int(rng.integers(k))
        served = int((y + 1) % k) if wrong[n] else y
        out.append((Experts(*_votes(rng, n, k, y, wrong, style, abstain)), y, served))
    return out


def _as_rows(xs: list[Experts]) -> list[Experts]:
    """The instances as rows of one batch (read-only views), as the replay has them."""
    ptr = np.zeros(len(xs) + 1, dtype=np.int64)
    np.cumsum([x.expert.size for x in xs], out=ptr[1:])
    cat = [np.concatenate([getattr(x, a) for x in xs]) for a in ("expert", "cls", "value")]
    e, c, v = cat[0].astype(np.int64), cat[1].astype(np.int64), cat[2].astype(np.float64)
    sizes = np.array([x.size for x in xs])
    classes = np.array([x.n_classes for x in xs])
    low = np.array([min(x.value.min(initial=0.0), 0.0) for x in xs])
    high = np.array([x.value.max(initial=0.0) for x in xs])
    return Experts.rows(e, c, v, ptr, sizes, classes, low, high)


def _runs(rng: np.random.Generator, length: int) -> list[tuple[int, int]]:
    """A split of ``length`` trials into runs: (start, end)."""
    out, at = [], 0
    while at < length:
        end = min(length, at + int(rng.integers(1, 80)))
        out.append((at, end))
        at = end
    return out


# -- top votes ----------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 40),
    k=st.integers(1, 6),
    style=st.sampled_from(["one-hot", "spread"]),
    abstain=st.sampled_from([0.0, 0.2, 0.8]),
    below=st.integers(0, 45),
)
def test_top_votes_are_the_sorts(
    seed: int, n: int, k: int, style: str, abstain: float, below: int
) -> None:
    rng = np.random.default_rng(seed)
    y = int(rng.integers(k))
    e, c, v = _votes(rng, n, k, y, rng.random(n) < 0.5, style, abstain)
    x = Experts(e, c, v)
    want = ref_top_votes(x.expert, x.cls, x.value, below)
    got = top_votes(x, below)
    assert (got[0].tolist(), got[1].tolist()) == want
    # the kernel takes the triples in any order, negative votes too
    order = rng.permutation(len(e))
    ea, ca = np.array(e, dtype=np.int64)[order], np.array(c, dtype=np.int64)[order]
    va = np.array(v, dtype=np.float64)[order] * rng.choice([1.0, -1.0])
    voters, tops = watch.top_votes(ea, ca, va, below)
    assert (voters.tolist(), tops.tolist()) == ref_top_votes(ea, ca, va, below)


# -- the drift watch ----------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 40),
    k=st.integers(2, 5),
    length=st.integers(1, 1_200),
    style=st.sampled_from(["one-hot", "spread"]),
    abstain=st.sampled_from([0.0, 0.1, 0.5]),
)
def test_the_drift_watch_steps_every_stream_as_page_hinkley_does(
    seed: int, n: int, k: int, length: int, style: str, abstain: float
) -> None:
    trials = _trials(seed, n, k, length, style, abstain)
    space = InputSpace(
        [str(j) for j in range(k)], experts={"expert_names": [f"e{i}" for i in range(n)]}
    )
    alerts, streams = ref_drift(n, trials, first=1)
    one = DriftWatch(space, "experts")
    for seq, (x, y, served) in enumerate(trials, 1):
        one.judged(seq, x, y, served, served)
    assert one.alerts == alerts
    assert {"model": one.export()["model"], "experts": one.export()["experts"]} == streams
    # as runs of rows of a batch, and the state read back halfway
    rows = _as_rows([x for x, _, _ in trials])
    runs = DriftWatch(space, "experts")
    for a, b in _runs(np.random.default_rng(seed), length):
        runs.judged_run(
            1 + a, rows[a:b], [y for _, y, _ in trials[a:b]], [s for *_, s in trials[a:b]]
        )
        if a <= length // 2 < b:
            runs = DriftWatch.read(runs.export(), space, "experts")
    assert runs.export() == one.export()


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), length=st.integers(1, 3_000))
def test_the_model_stream_alone_runs_as_it_steps(seed: int, length: int) -> None:
    trials = _trials(seed, 1, 2, length, "one-hot", 0.0)
    space = InputSpace(["a", "b"], attributes={"n_features": 2})
    alerts, streams = ref_drift(EXPERT_WATCH + 1, trials, first=5)
    runs = DriftWatch(space, "attributes")
    for a, b in _runs(np.random.default_rng(seed), length):
        part = trials[a:b]
        runs.judged_run(
            5 + a, [x for x, _, _ in part], [y for _, y, _ in part], [s for *_, s in part]
        )
    assert runs.alerts == alerts and runs.export()["model"] == streams["model"]


# -- the bound watch ----------------------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    """Equal documents, a NaN equal to a NaN (a learner whose weights all fell to 0)."""
    return repr(a) == repr(b)


def _learner(kind: str, n: int, k: int, beta: float, brier: float, share: float) -> Any:
    if kind == "committee":
        return build(
            {"kind": "committee", "alpha": 1.0 / math.sqrt(beta)}, labels=list(range(k)), size=n
        )
    spec = {"kind": "weighted-majority", "beta": beta, "brier": brier, "fixed_share": share}
    return build(spec, labels=list(range(k)), size=n)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 40),
    k=st.integers(2, 5),
    length=st.integers(1, 400),
    style=st.sampled_from(["one-hot", "spread"]),
    abstain=st.sampled_from([0.0, 0.0, 0.002, 0.05]),
    kind=st.sampled_from(["weighted-majority", "committee"]),
    beta=st.sampled_from([0.0, 0.3, 0.5, 0.9]),
    brier=st.sampled_from([0.0, 0.5, 1.0]),
    share=st.sampled_from([0.0, 0.01]),
)
def test_the_bound_watch_one_by_one_as_runs_and_as_it_was(
    seed: int,
    n: int,
    k: int,
    length: int,
    style: str,
    abstain: float,
    kind: str,
    beta: float,
    brier: float,
    share: float,
) -> None:
    if kind == "committee":
        k, beta = 2, max(beta, 0.3)
    trials = _trials(seed, n, k, length, style, abstain)
    space = InputSpace(list(range(k)), experts={"expert_names": [f"e{i}" for i in range(n)]})
    learner = _learner(kind, n, k, beta, brier, share)
    if rule_of(learner, space) is None:
        return
    for x, y, _ in trials[: length // 4]:  # weights of a learner that has learnt: offsets
        learner.learn(x, y)
    ref, one, runs = (BoundWatch(space, learner) for _ in range(3))
    for seq, (x, y, served) in enumerate(trials, 1):
        ref_bound(ref, seq, x, y, served)
        one.judged(seq, x, y, served, served)
    assert _same(one.export(), ref.export())
    rows = _as_rows([x for x, _, _ in trials])
    for a, b in _runs(np.random.default_rng(seed), length):
        ys, ps = [y for _, y, _ in trials[a:b]], [s for *_, s in trials[a:b]]
        runs.judged_run(1 + a, rows[a:b], ys, ps)
    assert _same(runs.export(), one.export()) and _same(runs.figures(), one.figures())
