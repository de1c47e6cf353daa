"""The bound watch: a monitor (:mod:`app.service.monitor`) of a model whose learner has a
proven mistake bound relative to its best sub-expert, that compares the learner's
mistakes on the log with that bound and records an alert when they cross it.

Weighted Majority (Littlestone & Warmuth 1994; ``weighted-majority`` and the ``fusion``
preset) with penalty beta makes, over a run of trials in which its best sub-expert has
loss L, at most

    M <= (c + L ln(1/beta) + U ln(1/(1 - alpha_s))) / D

mistakes (docs/tracking.rst, docs/fusion.rst), where

* c = ln(W / w_i) for that sub-expert's share of the weight at the start of the run: ln n
  for a fresh learner of n sub-experts;
* L is its mistakes (its top vote not the label), plus ``brier`` times its summed half
  Brier scores with the Brier term on;
* D = ln(2 / (1 + beta)); with ``weight_floor`` gamma < 1/2,
  D = ln(1 / (1 - (1 - beta)(1/2 - gamma)));
* with ``fixed_share`` alpha_s, U counts the run's updates: every trial with
  ``update="every_trial"``; with ``"on_mistake"`` U = M, which moves to
  D = ln(2 / (1 + beta)) - ln(1 / (1 - alpha_s)) and needs it above 0.

Committee (Mesterharm 1999) over two labels whose sub-experts each vote one label with 1
is Weighted Majority updating on mistakes with beta = alpha^-2 (on a mistake it multiplies
the weights of the sub-experts that voted the label by alpha and of those that voted the
prediction by 1/alpha; after rescaling only their ratio counts), and is watched as that.
Without a proven bound the watch does not follow the model: a Weighted Majority with both
``weight_floor`` and ``fixed_share`` on, or a floor of 1/2 or more, or a share too large
for its beta on mistakes; a Committee over more than two labels or with either option on
(its bounds are margin bounds, not relative to a sub-expert); any wrapper around these
learners. The bounds assume every sub-expert votes
on every trial (and, for Committee, one label with 1): a trial where one does not
suspends the watch until the run restarts (the figures say where and why).

A run starts with the model, and again whenever its learner changes in the log (a change
of its input grows it, a promote replaces it): c is then read from the learner's weights,
so the bound holds from there for whichever weights it starts with. A state import or a
rollback keeps the run, its learner's parameters unchanged: a learner set back, or given
weights learned elsewhere, is compared with what the algorithm guarantees on the log
since the run began, and crossing it says that it is behind that. One with other
parameters (a rollback past a promote) starts a run.

Crossing the bound records one alert (``kind`` "bound") through the drift alerts' path
(:mod:`app.service.alerts`); the watch is then over it and raises no other until its
mistakes are at or under the bound again (the best sub-expert's loss grows with its
mistakes), which re-arms it. Every worker replays the same trials, so each crosses at the
same log seq, and the watch's state travels in snapshots.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.service.monitor import WARM_ROWS, Kind, Monitor
from models.core.instance import Attributes, Experts, consecutive_expert_rows
from models.core.learner import Learner
from models.core.state import InvalidState, decode_array, encode_array, expect_keys
from models.inputs.space import InputSpace
from models.kernels.watch import (
    CROSSED,
    E_AT,
    E_BEST,
    E_BEST_MISTAKES,
    E_OWN,
    E_TRIALS,
    EVENT,
    NO_EXPERTS,
    NOT_ONE_HOT,
    NOT_VOTED,
    R_BRIER,
    R_DIVISOR,
    R_ONE_HOT,
    R_PER_LOSS,
    R_PER_TRIAL,
    bound_run,
    bound_trial,
)
from models.registry import build

__all__ = ["FORMAT", "KIND", "MAX_ALERTS", "NAME", "BoundWatch", "Rule", "rule_of"]

#: the watch's name among a model's monitors (it keys its state in snapshots)
NAME = "bound"
FORMAT, VERSION = "committee.bound-watch", 1
#: alerts a model keeps, the latest
MAX_ALERTS = 64
#: the learners' kinds the watch knows the bound of
WEIGHTED_MAJORITY = ("weighted-majority", "fusion")
COMMITTEE = "committee"
_WHY = {
    NOT_VOTED: "a sub-expert did not vote",
    NOT_ONE_HOT: "a sub-expert's vote was not one label with 1",
}


@dataclass(frozen=True, slots=True)
class Rule:
    """A learner's bound: ``per_loss`` = ln(1/beta), ``per_trial`` = ln(1/(1 - alpha_s))
    where every trial may share, ``divisor`` = D, ``brier`` the Brier term's weight,
    ``one_hot`` whether each sub-expert must vote one label with 1 (Committee);
    ``params`` the learner's parameters it follows from."""

    per_loss: float
    per_trial: float
    divisor: float
    brier: float
    one_hot: bool
    params: dict[str, Any]


def _params(learner: Learner) -> dict[str, Any]:
    """The learner's kind and parameters but its size and labels (which a run follows)."""
    got = learner.get_params()
    return {"kind": learner.kind} | {
        k: v for k, v in got.items() if k not in ("n_experts", "labels")
    }


def rule_of(learner: Learner, space: InputSpace) -> Rule | None:
    """The bound of ``learner`` over ``space`` (see the module's notes); None without one."""
    p = _params(learner)
    floor, share = float(p.get("weight_floor", 0.0)), float(p.get("fixed_share", 0.0))
    if p["kind"] == COMMITTEE:
        if space.n_classes != 2 or floor or share:
            return None
        alpha = float(p["alpha"])
        per_loss = 2.0 * math.log(alpha)  # beta = alpha^-2, in logs (alpha may be 1e200)
        beta = math.exp(-per_loss)
        return Rule(per_loss, 0.0, math.log(2.0 / (1.0 + beta)), 0.0, True, p)
    if p["kind"] not in WEIGHTED_MAJORITY or (floor and share) or floor >= 0.5:
        return None
    beta = float(p["beta"])
    per_loss = math.inf if beta == 0.0 else -math.log(beta)
    divisor, per_trial = math.log(2.0 / (1.0 + beta)), 0.0
    if floor:
        divisor = -math.log1p(-(1.0 - beta) * (0.5 - floor))
    if share:
        if p["update"] == "every_trial":
            per_trial = -math.log1p(-share)
        else:  # U = M: its term moves to the left
            divisor += math.log1p(-share)
            if divisor <= 0.0:
                return None
    return Rule(per_loss, per_trial, divisor, float(p.get("brier", 0.0)), False, p)


def _offsets(learner: Learner) -> np.ndarray:
    """ln(W / w_i) of each sub-expert's weight in ``learner`` (inf for a weight of 0)."""
    w = np.asarray(learner.weights(), dtype=np.float64)  # type: ignore[attr-defined]
    with np.errstate(divide="ignore", invalid="ignore"):  # all weights 0: a NaN bound
        return np.log(w.sum()) - np.log(w)


class BoundWatch:
    """The bound watch of one model (see the module's notes): its run's first trial
    (``since``, a seq; None before one), each sub-expert's ``offsets`` c_i, ``losses``
    and ``mistakes`` in the run, the run's ``trials`` and the learner's mistakes
    (``own``), where it was ``suspended`` (None: it is not), whether it is ``over`` the
    bound, and the alerts recorded, the latest :data:`MAX_ALERTS`."""

    def __init__(self, space: InputSpace, learner: Learner) -> None:
        self.alerts: list[dict[str, Any]] = []
        self.names: list[str] = []
        self.grown(space)
        self._start(learner)

    def _start(self, learner: Learner) -> None:
        """Start a run: the bound of ``learner`` (which follows the model), from its
        weights now."""
        rule = rule_of(learner, self.space)
        assert rule is not None, "a learner the watch does not follow"
        self.rule = rule
        self.rule_ = np.zeros(R_ONE_HOT + 1)
        self.rule_[[R_PER_LOSS, R_PER_TRIAL, R_DIVISOR, R_BRIER, R_ONE_HOT]] = (
            rule.per_loss,
            rule.per_trial,
            rule.divisor,
            rule.brier,
            rule.one_hot,
        )
        self.offsets = _offsets(learner)
        n = self.offsets.size
        self.losses = np.zeros(n)
        self.mistakes = np.zeros(n, dtype=np.int64)
        self.trials = self.own = 0
        self.since: int | None = None  # the seq of the run's first trial
        self.over = False
        self.suspended: dict[str, Any] | None = None

    # -- the monitor's contract ---------------------------------------------------------

    def grown(self, space: InputSpace) -> None:
        self.space = space
        self.names = space.describe_experts("experts")

    def relearned(self, learner: Learner) -> None:
        self._start(learner)

    def judged(self, seq: int, x: Attributes | Experts, y: int, served: int, own: int) -> None:
        if self.since is None:
            self.since = seq
        if self.suspended is not None or not isinstance(x, Experts):
            self.trials += 1
            return
        counts = np.array([self.trials, self.own, self.over], np.int64)
        code, bound, best = bound_trial(
            x.expert, x.cls, x.value, y, int(own != y), self.rule_,
            self.offsets, self.losses, self.mistakes, counts,
        )  # fmt: skip
        self._took(counts)
        if code in _WHY:
            self.suspended = {"seq": seq, "why": _WHY[code]}
            self.trials += 1
        elif code == CROSSED:
            self._alert(seq, bound, best, self.own, int(self.mistakes[best]), self.trials)
        elif code == NO_EXPERTS:
            self.bound()  # the least of no sub-experts: as before, a ValueError

    def judged_run(
        self,
        first: int,
        xs: Sequence[Attributes | Experts],
        ys: Sequence[int],
        predicted: Sequence[int],
    ) -> None:
        if not len(ys):
            return
        run = consecutive_expert_rows(xs)
        if self.suspended is not None or run is None:  # one by one: not rows of a batch
            for t, (x, y, p) in enumerate(zip(xs, ys, predicted, strict=True)):
                self.judged(first + t, x, y, p, p)
            return
        if self.since is None:
            self.since = first
        batch = run[0].between(run[1], run[1] + len(xs))
        ys_ = np.asarray(ys, dtype=np.int64)
        events = np.empty((len(ys_), EVENT), np.int64)
        bounds = np.empty(len(ys_))
        counts = np.array([self.trials, self.own, self.over], np.int64)
        k, stopped, code = bound_run(
            ys_, np.asarray(predicted, dtype=np.int64), batch.indptr, batch.expert, batch.cls,
            batch.value, self.rule_, self.offsets, self.losses, self.mistakes, counts,
            events, bounds,
        )  # fmt: skip
        self._took(counts)
        for row, bound in zip(events[:k].tolist(), bounds[:k].tolist(), strict=True):
            self._alert(
                first + row[E_AT],
                bound,
                row[E_BEST],
                row[E_OWN],
                row[E_BEST_MISTAKES],
                row[E_TRIALS],
            )
        if code in _WHY:
            self.suspended = {"seq": first + stopped, "why": _WHY[code]}
        elif code == NO_EXPERTS:
            self.bound()  # the least of no sub-experts: as before, a ValueError

    def _took(self, counts: np.ndarray) -> None:
        self.trials, self.own, over = counts.tolist()
        self.over = bool(over)

    def bound(self) -> tuple[float, int]:
        """The bound on the run's mistakes now, and the sub-expert it is evaluated at
        (the least c_i + L_i ln(1/beta); the first of equals)."""
        r = self.rule
        with np.errstate(invalid="ignore"):  # inf * 0: a loss of 0 costs nothing
            costs = self.offsets + np.where(self.losses > 0, self.losses * r.per_loss, 0.0)
        best = int(np.argmin(costs))
        return (float(costs[best]) + self.trials * r.per_trial) / r.divisor, best

    def _alert(
        self, seq: int, bound: float, best: int, own: int, best_mistakes: int, trials: int
    ) -> None:
        """Record the crossing at ``seq`` of ``bound`` (at sub-expert ``best``)."""
        self.alerts.append(
            {
                "kind": "bound",
                "what": NAME,
                "seq": seq,
                "since": self.since,
                "mistakes": own,
                "bound": bound,
                "best": self.names[best] if best < len(self.names) else str(best),
                "best_mistakes": best_mistakes,
                "trials": trials,
            }
        )
        del self.alerts[:-MAX_ALERTS]

    # -- what it shows, its state -------------------------------------------------------

    def figures(self) -> dict[str, Any]:
        bound, best = self.bound() if self.offsets.size else (math.inf, 0)
        shown = self.suspended is None and math.isfinite(bound)
        return {
            "learner": dict(self.rule.params),
            "since": self.since,
            "trials": self.trials,
            "mistakes": self.own,
            "bound": bound if shown else None,
            "best": {
                "expert": self.names[best] if best < len(self.names) else str(best),
                "mistakes": int(self.mistakes[best]),
                "loss": float(self.losses[best]),
            }
            if shown
            else None,
            "over": self.over,
            "suspended": self.suspended,
            "alerts": list(self.alerts),
        }

    def export(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "learner": self.rule.params,
            "since": self.since,
            "trials": self.trials,
            "own": self.own,
            "over": self.over,
            "suspended": self.suspended,
            "offsets": encode_array(self.offsets),
            "losses": encode_array(self.losses),
            "mistakes": encode_array(self.mistakes),
            "alerts": self.alerts,
        }

    @classmethod
    def read(cls, doc: Any, space: InputSpace, learner: Learner) -> BoundWatch:
        """The watch of state ``doc`` for a model of ``space`` and ``learner``: its run
        goes on, or restarts (its alerts kept) when the learner's parameters are not those
        it counted under; :class:`InvalidState` when it does not fit."""
        what = "monitors.bound"
        keys = {"format", "version", "learner", "since", "trials", "own", "over"}
        keys |= {"suspended", "offsets", "losses", "mistakes", "alerts"}
        doc = expect_keys(doc, what, keys)
        if doc["format"] != FORMAT or doc["version"] != VERSION:
            raise InvalidState(f"{what}: expected format {FORMAT!r} version {VERSION}")
        w = cls(space, learner)
        alerts = doc["alerts"]
        if not isinstance(alerts, list) or len(alerts) > MAX_ALERTS:
            raise InvalidState(f"{what}.alerts: expected a list of at most {MAX_ALERTS}")
        for i, a in enumerate(alerts):
            if not (isinstance(a, dict) and type(a.get("seq")) is int and a.get("what") == NAME):
                raise InvalidState(f"{what}.alerts[{i}]: expected an alert")
        w.alerts = alerts
        for k in ("trials", "own"):
            if type(doc[k]) is not int or doc[k] < 0:
                raise InvalidState(f"{what}.{k}: expected an integer >= 0, got {doc[k]!r}")
        since = doc["since"]
        if since is not None and (type(since) is not int or since < 0):
            raise InvalidState(f"{what}.since: expected null or a seq, got {since!r}")
        if doc["learner"] != w.rule.params:  # another learner: a new run from here
            return w
        n = w.offsets.size
        offsets = decode_array(doc["offsets"], f"{what}.offsets", "float64", (n,))
        losses = decode_array(doc["losses"], f"{what}.losses", "float64", (n,))
        mistakes = decode_array(doc["mistakes"], f"{what}.mistakes", "int64", (n,))
        trials, own = doc["trials"], doc["own"]
        if np.isnan(offsets).any() or not (losses >= 0).all() or not np.isfinite(losses).all():
            raise InvalidState(f"{what}: expected offsets, and finite losses >= 0")
        if (mistakes < 0).any() or (mistakes > trials).any() or own > trials:
            raise InvalidState(f"{what}: expected 0 <= mistakes <= trials")
        suspended = doc["suspended"]
        if suspended is not None and not (
            isinstance(suspended, dict)
            and type(suspended.get("seq")) is int
            and isinstance(suspended.get("why"), str)
        ):
            raise InvalidState(f"{what}.suspended: expected null or {{seq, why}}")
        if type(doc["over"]) is not bool:
            raise InvalidState(f"{what}.over: expected true or false")
        w.offsets, w.losses, w.mistakes = offsets, losses, mistakes
        w.since, w.trials, w.own = since, trials, own
        w.over, w.suspended = doc["over"], suspended
        return w


def warm() -> None:
    """Compile the kernels (or load them from numba's cache): trials one by one and as
    a run, their votes alone or rows of a batch (read-only), and the state read back."""
    space = InputSpace(["a", "b"], experts={"expert_names": ["e0", "e1"]})
    learner = build({"kind": "weighted-majority"}, labels=["a", "b"], size=2)
    rows = Experts.rows(*WARM_ROWS)
    w = BoundWatch(space, learner)
    for x in (rows[0], Experts([0, 1], [0, 1], [1.0, 1.0])):
        w.judged(1, x, 0, 1, 1)
    w.judged_run(2, rows, [0, 1], [1, 1])
    BoundWatch.read(w.export(), space, learner)


def _follows(space: InputSpace, form: str, learner: Learner) -> bool:
    return form == "experts" and rule_of(learner, space) is not None


def _fresh(space: InputSpace, form: str, learner: Learner) -> Monitor:
    return BoundWatch(space, learner)


def _read(doc: Any, space: InputSpace, form: str, learner: Learner) -> Monitor:
    return BoundWatch.read(doc, space, learner)


#: the kind: every model whose learner has a bound relative to its best sub-expert
KIND = Kind(follows=_follows, fresh=_fresh, read=_read)
