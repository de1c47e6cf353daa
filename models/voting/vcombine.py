"""Voting over on-line hypotheses: V-B and V-Combine (ALGORITHMS.md §3.2; S4 §V.B).

The pure functions of :mod:`models.voting.schedule` give the schedule arithmetic: :func:`targets`,
:func:`window`, :func:`creation_spacing`, :func:`live_window` and :func:`restart_wait`
(re-exported here).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from models.core.hypothesis import Label
from models.core.learner import Learner, SpecList
from models.core.nested import build_inner, check_size, inner_spec, input_kind_of
from models.core.params import (
    MAX_SIZE,
    Bool,
    Integer,
    InvalidParameter,
    Labels,
    Options,
    Real,
)
from models.voting.compiled import CompiledMembers
from models.voting.hypothesis import (
    HYPOTHESIS_CLASSES,
    VotingHypothesis,
    hypothesis_fields,
)
from models.voting.schedule import (
    SlotView,
    creation_spacing,
    live_window,
    restart_wait,
    targets,
    window,
)
from models.voting.state import VotingState
from models.voting.trial import find_followers, link_followers

__all__ = [
    "SlotView",
    "VCombine",
    "VotingHypothesis",
    "creation_spacing",
    "live_window",
    "restart_wait",
    "targets",
    "window",
]


class VCombine(VotingState):
    """V-Combine: vote over spaced hypotheses of the best of v learners (V-B when v = 1).

    Every learner learns each trial from its own prediction. The voters are the h slots'
    hypotheses plus the current hypothesis of the *best* learner B, the one with the fewest
    mistakes so far (``select="fewest-mistakes"``, ties to list order, A11). Slot targets are
    j * s, j = 1..h; after trial tau = h * s the spacing s doubles, even multiples of the old
    spacing are kept and the new targets (h/2+1..h) * s are created. Each target has a window
    of m + 1 trials, m = min(W, floor(s/2)) with s the spacing when the target was created
    (A17). At the window start B's current hypothesis is saved (a snapshot) and votes at once;
    at each later window trial a new hypothesis of B (a new (learner, version) pair) replaces
    it if its estimate is strictly higher. The estimate (A3) is correct/tried over the r most
    recent labelled trials, scored when the hypothesis is considered, plus (with
    ``accuracy="buffer+online"``) its record on the trials it predicted while it was B's
    current hypothesis and its window was open.

    Class j's vote is the sum of the voters' score vectors, raw (``vote_normalize="none"``,
    S4) or each divided by its l1 norm or largest magnitude first (A12). The output is B's
    prediction if M_B < M_V, else the vote's, where M_V counts the vote's mistakes and M_B the
    mistakes of the learner that is B at that trial, both since the last restart (A5). From
    tau >= d * 2^rho (rho restarts so far) the restart condition M_B < M_V is checked after
    every trial (A4); a restart discards the slots and resets tau, s, M_B and M_V, never the
    learners. Trial order as in §3.2 "Order of operations".

    ``select="weighted-majority"`` chooses B instead as the learner with the largest weight
    of a Weighted Majority over the learners (LW94, §2.8), ties to list order: weights start
    at 1 and the learners that predicted wrongly are multiplied by ``beta``, on every trial
    (``wm_update="every_trial"``) or only on trials where the weighted vote of the learners'
    predicted labels was wrong (``"on_mistake"``). With every-trial updates and beta > 0 the
    weights are beta^mistakes, so B is again the learner with the fewest mistakes; the
    on-mistake variant gives a different choice. WM only selects B, it never predicts.

    A trial costs O((v + h) m) plus, at window trials with a new hypothesis, O(r m) for its
    estimate and O(n) for a snapshot. ``updated`` is True when a learner updated, a slot
    changed, or the choice of B or between B and the vote changed: whenever the frozen
    predictor (:meth:`snapshot`) may have changed, so ``version_`` moves with it. A trial
    that a learner refuses (an overflow) is undone whole: no learner keeps it.

    Parameters
    ----------
    learners
        Specs of the v learners, all over attributes or all over sub-experts; each is built
        with the wrapper's labels and size.
    h
        Number of slots, even.
    r
        Number of recent trials kept for accuracy estimates.
    window
        W, the largest window size.
    restart_wait
        d, the first wait before restarts are checked.
    accuracy
        ``"buffer+online"`` or ``"buffer"``.
    vote_normalize
        ``"none"``, ``"l1"`` or ``"maxabs"``.
    select
        ``"fewest-mistakes"`` or ``"weighted-majority"``.
    beta, wm_update
        The Weighted Majority selector's penalty factor in [0, 1) and update variant.
    restarts
        Whether to restart the voting.
    labels, n_features, n_experts
        Supplied by the model; every learner gets the same.

    Examples
    --------
    >>> vb = VCombine([{"kind": "perceptron"}], h=4, labels=["+", "-"], n_features=2)
    >>> for t in range(5):
    ...     _ = vb.learn([1.0, 0.0] if t % 2 else [0.0, 1.0], "+" if t % 2 else "-")
    >>> [(s.target, s.trial) for s in vb.schedule]
    [(2, 2), (4, 4), (6, 0), (8, 0)]
    """

    kind = "v-combine"
    _parameter_constraints = {
        "learners": SpecList(),
        "h": Integer(2, 100_000),
        "r": Integer(0, 100_000),
        "window": Integer(0, 2**40),
        "restart_wait": Integer(1, 2**40),
        "accuracy": Options(("buffer+online", "buffer")),
        "vote_normalize": Options(("none", "l1", "maxabs")),
        "select": Options(("fewest-mistakes", "weighted-majority")),
        "beta": Real(0.0, 1.0, high_open=True),
        "wm_update": Options(("every_trial", "on_mistake")),
        "restarts": Bool(),
        "labels": Labels(),
        "n_features": Integer(1, MAX_SIZE, optional=True),
        "n_experts": Integer(1, MAX_SIZE, optional=True),
    }
    #: Per learner: total mistakes, mistakes since the last restart, WM weight; scalars_ =
    #: [tau, spacing, restarts, vote mistakes since the last restart]; the slots (a table, the
    #: hypotheses' reals and one weight row per held slot, in slot order) and the r-buffer
    #: (labels, offsets into the concatenated index and value arrays), oldest first.
    _state_arrays = {
        "wm_weights_": "float64",
        "learner_mistakes_": "int64",
        "recent_mistakes_": "int64",
        "scalars_": "int64",
        "slot_table_": "int64",
        "slot_reals_": "float64",
        "slot_weights_": "float64",
        "buffer_labels_": "int64",
        "buffer_offsets_": "int64",
        "buffer_index_": "int64",
        "buffer_values_": "float64",
    }

    def __init__(
        self,
        learners: Sequence[Mapping[str, Any] | Learner],
        h: int = 20,
        r: int = 100,
        window: int = 100,
        restart_wait: int = 100,
        accuracy: str = "buffer+online",
        vote_normalize: str = "none",
        select: str = "fewest-mistakes",
        beta: float = 0.5,
        wm_update: str = "every_trial",
        restarts: bool = True,
        labels: Sequence[Label] = (1, -1),
        n_features: int | None = None,
        n_experts: int | None = None,
    ) -> None:
        self.learners: Any = learners
        self.h = h
        self.r = r
        self.window = window
        self.restart_wait = restart_wait
        self.accuracy = accuracy
        self.vote_normalize = vote_normalize
        self.select = select
        self.beta = beta
        self.wm_update = wm_update
        self.restarts = restarts
        self.labels = labels  # type: ignore[assignment]
        self.n_features = n_features
        self.n_experts = n_experts
        self._initialise()

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def input_kind_for(cls, params: Mapping[str, Any]) -> str:
        learners = params.get("learners")
        expected = SpecList().check(learners)
        if expected:
            raise InvalidParameter("learners", learners, expected)
        kinds = [input_kind_of(item, f"learners[{i}]") for i, item in enumerate(learners)]  # type: ignore[arg-type]
        if len(set(kinds)) > 1:
            raise InvalidParameter(
                "learners", kinds, "learners that all take attributes or all take sub-experts"
            )
        return kinds[0]

    @property
    def input_size(self) -> int:
        return int((self.n_features if self.input_kind == "attributes" else self.n_experts) or 0)

    def _check_params(self) -> None:
        if self.h % 2:
            raise InvalidParameter("h", self.h, "an even integer >= 2")
        members = self.members()
        kind = self.input_kind_for({"learners": members})
        size = check_size(self, kind, f"{kind} learners")
        self.input_kind = kind
        specs, built, checks, codes = [], [], [], []
        for i, item in enumerate(members):
            inner = build_inner(item, labels=self.labels, size=size, path=f"learners[{i}]")
            probe = inner.snapshot()
            if type(probe) not in HYPOTHESIS_CLASSES:  # slots must be able to export it
                raise InvalidParameter(
                    f"learners[{i}]", inner_spec(inner), "a learner with a linear hypothesis"
                )
            specs.append(inner_spec(inner))
            built.append(inner)
            checks.append(probe.check)
            codes.append(hypothesis_fields(probe)[0])
        self.learners_: list[Learner] = built
        self._checks, self._codes = checks, codes
        ranges = [inner.value_range or (-np.inf, np.inf) for inner in built]
        low, high = max(lo for lo, _ in ranges), min(hi for _, hi in ranges)
        self.value_range = None if (low, high) == (-np.inf, np.inf) else (low, high)
        self._online = self.accuracy == "buffer+online"
        self.weighted_vote = self.select == "weighted-majority"
        self.followers = find_followers(specs)
        link_followers(self.learners_, self.followers)
        leaders = [i for i in range(len(built)) if i not in self.followers]
        self._refusing_first = sorted(leaders, key=lambda i: not built[i].can_refuse())

    def members(self) -> Sequence[Mapping[str, Any] | Learner]:
        """The specs (or learner objects) of the members to build."""
        return self.learners

    def spec_params(self) -> dict[str, Any]:
        return {**self.get_params(), "learners": self.learners_}

    def _reset_state(self) -> None:
        for inner in self.learners_:
            inner.reset()
        v = len(self.learners_)
        self.learner_mistakes_ = np.zeros(v, dtype=np.int64)
        self.recent_mistakes_ = np.zeros(v, dtype=np.int64)
        self.wm_weights_ = np.ones(v)
        self.scalars_ = np.array([0, 1, 0, 0], dtype=np.int64)
        self.buffer_: deque[tuple[Any, int]] = deque(maxlen=self.r)
        self.slots_ = self._initial_slots()
        self._loaded: dict[str, np.ndarray] = {}
        self._fast: CompiledMembers | None = None  # built at the next trial
        self._fast_tried = False
