"""The cases of the common learner check suite (STYLE.md #8), in the manner of River's checks.

Every learner kind in ``models.registry.KINDS`` appears here with its important variants.
A test that takes an argument named ``case`` runs once per entry of :data:`CASES`; a
:class:`Case` builds its learner through the registry and generates seeded trial streams
that mix every instance form the learners accept (dense arrays, lists, sparse mappings,
:class:`~models.core.instance.Attributes` / :class:`~models.core.instance.Experts`), with
active sets that change from trial to trial and some empty instances.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from models import registry
from models.core.instance import Attributes, Experts
from models.core.learner import Learner

N_FEATURES = 10
N_EXPERTS = 8


@dataclass(frozen=True)
class Case:
    """One learner spec with the context it is built in."""

    id: str
    spec: dict[str, Any]
    labels: tuple[Hashable, ...]
    size: int
    #: only 0/1 attribute values, so that exact zero margins occur (the lectures' setting)
    binary: bool = False

    # -- what the learner is ------------------------------------------------------------

    @property
    def kind(self) -> str:
        return str(self.spec["kind"])

    @property
    def attributes(self) -> bool:
        """True for attribute learners, False for sub-expert learners."""
        return registry.KINDS[self.kind].input_kind_for(self.spec) == "attributes"

    @property
    def chain(self) -> list[str]:
        """The kinds from the outermost wrapper down to the learner doing the arithmetic."""
        kinds, spec = [], self.spec
        while True:
            kinds.append(str(spec["kind"]))
            if "learner" not in spec:
                return kinds
            spec = spec["learner"]

    @property
    def wrapper(self) -> bool:
        """Whether the learner wraps others (beyond the sub-expert conversion)."""
        return bool(WRAPPERS & set(self.chain))

    @property
    def predicts_apart(self) -> bool:
        """Whether predictions come from something other than the learner that updates
        (an average, a vote), so a mistake need not cause an update."""
        voters = {"averaging", "v-combine", "vr-combine", "ecoc", "bagging", "boosting"}
        return bool(voters & set(self.chain))

    @property
    def base_kind(self) -> str:
        """The kind doing the arithmetic: the innermost learner."""
        return self.chain[-1]

    @property
    def any_reals(self) -> bool:
        """Whether instance values outside [0, 1] are allowed (Perceptron and ALMA only)."""
        spec = self.spec
        while "learner" in spec:
            spec = spec["learner"]
        bases = spec.get("learners", [spec])
        return all(
            (b["learner"]["kind"] if b["kind"] == "subexpert" else b["kind"])
            in ("perceptron", "alma")
            for b in bases
        )

    @property
    def strict(self) -> bool:
        """A binary learner that predicts the second label on a zero margin."""
        return bool(self.spec.get("strict", False))

    @property
    def local_updates(self) -> bool:
        """Whether a trial leaves the weights of inactive features/sub-experts untouched.

        Committee renormalises and ALMA projects the whole vector, so they do not; recycling
        re-learns stored instances and an average moves everywhere; a fixed share moves
        every weight.
        """
        shares = bool(self.spec.get("fixed_share"))
        return self.base_kind not in ("committee", "alma") and not self.wrapper and not shares

    @property
    def nonneg_arrays(self) -> list[tuple[str, ...]]:
        """Paths (child roles..., array name) of the state arrays holding weights that must
        not be negative: every learned array of the Winnow family but their scalars."""
        winnow_family = ("winnow", "balanced-winnow", "committee", "multiclass-winnow")
        winnow_family += ("weighted-majority", "fusion")
        if self.base_kind not in winnow_family:
            return []
        roles = {"ecoc": "column:0", "bagging": "model:0", "boosting": "model:0"}
        prefix = tuple(roles.get(kind, "learner") for kind in self.chain[:-1])
        names = registry.KINDS[self.base_kind]._state_arrays
        return [(*prefix, name) for name in names if name != "scalars_"]

    def build(self) -> Learner:
        return registry.build(self.spec, labels=self.labels, size=self.size)

    # -- streams -------------------------------------------------------------------------

    def stream(self, n: int, seed: int) -> list[tuple[Any, Hashable]]:
        """``n`` seeded trials (instance, label) in mixed forms, values in [0, 1]."""
        rng = np.random.default_rng(seed)
        make = self._attribute_trial if self.attributes else self._expert_trial
        return [make(rng, t) for t in range(n)]

    def real_stream(self, n: int, seed: int) -> list[tuple[Any, Hashable]]:
        """Dense trials with arbitrary real values (for Perceptron/ALMA-based cases)."""
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(n):
            shape = (self.size,) if self.attributes else (self.size, len(self.labels))
            x = rng.normal(scale=3.0, size=shape) * (rng.random(shape) < 0.5)
            out.append((x, self.labels[int(rng.integers(len(self.labels)))]))
        return out

    def dense(self, x: Any) -> np.ndarray:
        """The full-size dense form of an instance in any accepted form."""
        if self.attributes:
            return Attributes.coerce(x).dense(self.size)
        return Experts.coerce(x).dense(self.size, len(self.labels))

    def _values(self, rng: np.random.Generator, m: int) -> np.ndarray:
        v = np.ones(m)
        if self.binary:
            return v
        frac = rng.random(m) < 0.3
        v[frac] = rng.choice([0.25, 0.5, 0.75, float(rng.random())], size=int(frac.sum()))
        return v

    def _attribute_trial(self, rng: np.random.Generator, t: int) -> tuple[Any, Hashable]:
        n = self.size
        density = rng.choice([0.0, 0.15, 0.4, 0.8], p=[0.1, 0.4, 0.3, 0.2])
        active = np.flatnonzero(rng.random(n) < density)
        x = np.zeros(n)
        x[active] = self._values(rng, active.size)
        positive = x[0] > 0.4 or x[1] > 0.4
        if rng.random() < 0.1:
            positive = not positive
        y = self.labels[0] if positive else self.labels[1]
        form = t % 4
        if form == 0:
            return x, y
        if form == 1:  # a dense list, shorter than n when the tail is empty
            return x[: active.max() + 1 if active.size else 0].tolist(), y
        if form == 2:
            return {int(i): float(x[i]) for i in rng.permutation(active)}, y
        return Attributes(active, x[active]), y

    def _expert_trial(self, rng: np.random.Generator, t: int) -> tuple[Any, Hashable]:
        n, k = self.size, len(self.labels)
        y = int(rng.integers(k))
        x = np.zeros((n, k))
        if rng.random() >= 0.08:  # else an empty instance: nobody votes
            for i in range(n):
                u = rng.random()
                if u < 0.25:
                    continue  # abstains
                if u < 0.8:
                    good = i < 2 and rng.random() < 0.8
                    x[i, y if good else int(rng.integers(k))] = 1.0
                else:
                    x[i] = rng.dirichlet(np.ones(k))
        form = t % 3
        if form == 0:
            return x, self.labels[y]
        if form == 1:  # nested lists, without the trailing experts that abstain
            rows = np.flatnonzero(x.any(axis=1))
            return x[: rows.max() + 1 if rows.size else 1].tolist(), self.labels[y]
        e, c = np.nonzero(x)
        order = rng.permutation(e.size)
        return Experts(e[order], c[order], x[e, c][order]), self.labels[y]


WRAPPERS = {"recycling", "averaging", "v-combine", "vr-combine", "ecoc", "bagging", "boosting"}


def _cases() -> list[Case]:
    attr = ("pos", "neg")
    n = N_FEATURES
    abc = ("a", "b", "c")
    four = (0, 1, 2, 3)
    m = N_EXPERTS
    bw = {"kind": "balanced-winnow", "alpha": 1.5}
    return [
        Case("winnow", {"kind": "winnow"}, (1, -1), n),
        Case("winnow-strict", {"kind": "winnow", "theta": 2.0, "strict": True}, attr, n, True),
        Case(
            "winnow-eliminate", {"kind": "winnow", "demotion": "eliminate", "theta": 2.0}, attr, n
        ),
        Case(
            "winnow-thick",
            {"kind": "winnow", "alpha": 1.5, "theta_minus": 1.5, "theta_plus": 3.0},
            attr,
            n,
        ),
        Case("balanced", {"kind": "balanced-winnow"}, attr, n),
        Case("balanced-s1", {"kind": "balanced-winnow", "alpha": 2.0, "theta": float(n)}, attr, n),
        Case(
            "balanced-s2",
            {
                "kind": "balanced-winnow",
                "alpha": 2.0,
                "theta": 2.0,
                "init_pos": 1.0,
                "init_neg": 0.5,
                "strict": True,
            },
            attr,
            n,
            True,
        ),
        Case("balanced-beta", {"kind": "balanced-winnow", "alpha": 1.5, "beta": 0.8}, (1, -1), n),
        Case("perceptron", {"kind": "perceptron"}, attr, n),
        Case("alma-p2", {"kind": "alma", "p": 2.0}, attr, n),
        Case("alma-p3", {"kind": "alma", "p": 3.0, "alma_alpha": 0.8}, (1, -1), n),
        Case("committee", {"kind": "committee", "alpha": 1.5}, abc, m),
        Case("multiclass-winnow", {"kind": "multiclass-winnow", "alpha": 0.5}, four, m),
        Case("wm-every", {"kind": "weighted-majority", "update": "every_trial"}, abc, m),
        Case("wm-mistake", {"kind": "weighted-majority", "update": "on_mistake"}, four, m),
        # the tracking options (docs/tracking.rst)
        Case("winnow-floor", {"kind": "winnow", "weight_floor": 0.25}, attr, n),
        Case(
            "winnow-eliminate-floor",
            {"kind": "winnow", "demotion": "eliminate", "theta": 2.0, "weight_floor": 0.5},
            attr,
            n,
        ),
        Case(
            "balanced-floor",
            {"kind": "balanced-winnow", "alpha": 2.0, "weight_floor": 0.5},
            attr,
            n,
        ),
        Case("committee-floor", {"kind": "committee", "alpha": 1.5, "weight_floor": 0.2}, abc, m),
        Case(
            "committee-tracking",
            {"kind": "committee", "alpha": 1.5, "weight_floor": 0.2, "fixed_share": 0.05},
            four,
            m,
        ),
        Case("wm-floor", {"kind": "weighted-majority", "weight_floor": 0.2}, abc, m),
        Case("fusion", {"kind": "fusion"}, abc, m),
        Case("fusion-share", {"kind": "fusion", "beta": 0.3, "fixed_share": 0.05}, four, m),
        Case(
            "wm-mistake-tracking",
            {
                "kind": "weighted-majority",
                "update": "on_mistake",
                "weight_floor": 0.2,
                "fixed_share": 0.05,
            },
            four,
            m,
        ),
        Case(
            "se-balanced-floor",
            {"kind": "subexpert", "learner": {**bw, "weight_floor": 0.5}},
            abc,
            m,
        ),
        Case(
            "recycling-committee-tracking",
            {
                "kind": "recycling",
                "size": 4,
                "max_updates": 50,
                "learner": {"kind": "committee", "weight_floor": 0.2, "fixed_share": 0.05},
            },
            four,
            m,
        ),
        Case(
            "recycling-winnow-floor",
            {"kind": "recycling", "size": 5, "learner": {"kind": "winnow", "weight_floor": 0.25}},
            attr,
            n,
        ),
        Case(
            "averaging-committee-share",
            {"kind": "averaging", "learner": {"kind": "committee", "fixed_share": 0.05}},
            abc,
            m,
        ),
        Case("se-balanced-pred", {"kind": "subexpert", "learner": bw}, abc, m),
        Case(
            "se-balanced-runner",
            {"kind": "subexpert", "learner": bw, "subexpert_z": "runner_up"},
            four,
            m,
        ),
        Case(
            "se-perceptron-pred",
            {"kind": "subexpert", "learner": {"kind": "perceptron"}, "subexpert_z": "predicted"},
            abc,
            m,
        ),
        Case(
            "se-perceptron-runner",
            {"kind": "subexpert", "learner": {"kind": "perceptron"}, "subexpert_z": "runner_up"},
            four,
            m,
        ),
        Case(
            "se-alma-pred",
            {"kind": "subexpert", "learner": {"kind": "alma"}, "subexpert_z": "predicted"},
            abc,
            m,
        ),
        Case("se-alma-runner", {"kind": "subexpert", "learner": {"kind": "alma"}}, four, m),
        Case("recycling-balanced", {"kind": "recycling", "size": 8, "learner": bw}, attr, n),
        Case(
            "recycling-winnow-u1",
            {"kind": "recycling", "size": 5, "max_updates": 1, "learner": {"kind": "winnow"}},
            attr,
            n,
        ),
        Case(
            "recycling-se-alma",
            {
                "kind": "recycling",
                "size": 6,
                "learner": {"kind": "subexpert", "learner": {"kind": "alma", "p": 3.0}},
            },
            abc,
            m,
        ),
        Case(
            "recycling-committee-u50",
            {"kind": "recycling", "size": 4, "max_updates": 50, "learner": {"kind": "committee"}},
            four,
            m,
        ),
        Case(
            "recycling-wm-generic",
            {"kind": "recycling", "size": 5, "learner": {"kind": "weighted-majority"}},
            abc,
            m,
        ),
        Case("ecoc-balanced", {"kind": "ecoc", "learner": bw}, abc, n),
        Case(
            "ecoc-perceptron-loss",
            {"kind": "ecoc", "learner": {"kind": "perceptron"}, "decoding": "loss"},
            four,
            n,
        ),
        Case(
            "ecoc-winnow-random",
            {
                "kind": "ecoc",
                "learner": {"kind": "winnow"},
                "code": "random",
                "length": 6,
                "seed": 3,
            },
            four,
            n,
        ),
        Case(
            "ecoc-alma-one-per-class",
            {"kind": "ecoc", "learner": {"kind": "alma"}, "code": "one-per-class"},
            abc,
            n,
        ),
        Case("ecoc-balanced-dense", {"kind": "ecoc", "learner": bw, "code": "dense"}, attr, n),
        Case(
            "bagging-perceptron",
            {"kind": "bagging", "learner": {"kind": "perceptron"}, "n_models": 5},
            attr,
            n,
        ),
        Case(
            "bagging-committee-scores",
            {
                "kind": "bagging",
                "learner": {"kind": "committee", "alpha": 1.5},
                "n_models": 4,
                "vote": "scores",
                "seed": 7,
            },
            abc,
            m,
        ),
        Case(
            "bagging-ecoc",
            {
                "kind": "bagging",
                "learner": {"kind": "ecoc", "learner": {"kind": "perceptron"}},
                "n_models": 3,
            },
            abc,
            n,
        ),
        Case("boosting-balanced", {"kind": "boosting", "learner": bw, "n_models": 5}, attr, n),
        Case(
            "boosting-se-perceptron",
            {
                "kind": "boosting",
                "learner": {"kind": "subexpert", "learner": {"kind": "perceptron"}},
                "n_models": 4,
                "seed": 2,
            },
            four,
            m,
        ),
        Case(
            "vr-combine-small",
            {
                "kind": "vr-combine",
                "alphas": [1.1],
                "ps": [3.0],
                "perceptron": False,
                "size": 6,
                "h": 4,
                "r": 10,
                "window": 8,
                "restart_wait": 10,
            },
            abc,
            m,
        ),
        Case(
            "vb-se-balanced",
            {
                "kind": "v-combine",
                "h": 4,
                "r": 10,
                "window": 8,
                "restart_wait": 10,
                "learners": [{"kind": "subexpert", "learner": bw}],
            },
            abc,
            m,
        ),
        Case(
            "vcombine-experts",
            {
                "kind": "v-combine",
                "h": 6,
                "r": 20,
                "window": 10,
                "restart_wait": 20,
                "learners": [
                    {"kind": "subexpert", "learner": bw},
                    {"kind": "committee"},
                    {"kind": "multiclass-winnow"},
                ],
            },
            four,
            m,
        ),
        Case(
            "vcombine-attributes",
            {
                "kind": "v-combine",
                "h": 4,
                "r": 10,
                "window": 8,
                "restart_wait": 10,
                "learners": [bw, {"kind": "winnow"}],
            },
            attr,
            n,
        ),
        Case(
            "vcombine-wm-l1",
            {
                "kind": "v-combine",
                "h": 4,
                "r": 10,
                "restart_wait": 10,
                "select": "weighted-majority",
                "wm_update": "on_mistake",
                "vote_normalize": "l1",
                "learners": [{"kind": "committee"}, {"kind": "weighted-majority"}],
            },
            abc,
            m,
        ),
        Case(
            "averaging-perceptron",
            {"kind": "averaging", "learner": {"kind": "perceptron"}},
            attr,
            n,
        ),
        Case(
            "averaging-alma-p3",
            {"kind": "averaging", "learner": {"kind": "alma", "p": 3.0}},
            (1, -1),
            n,
        ),
        Case(
            "averaging-committee",
            {"kind": "averaging", "learner": {"kind": "committee", "alpha": 1.5}},
            abc,
            m,
        ),
        Case(
            "averaging-recycling-se-balanced",
            {
                "kind": "averaging",
                "learner": {
                    "kind": "recycling",
                    "size": 6,
                    "learner": {"kind": "subexpert", "learner": bw},
                },
            },
            four,
            m,
        ),
        Case(
            "se-alma-p3-runner",
            {
                "kind": "subexpert",
                "learner": {"kind": "alma", "p": 3.0},
                "subexpert_z": "runner_up",
            },
            abc,
            m,
        ),
    ]


CASES = _cases()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test that takes ``case`` once per entry of CASES (unless it chose its own)."""
    own = any(
        "case" in (m.args[0].split(",") if isinstance(m.args[0], str) else m.args[0])
        for m in metafunc.definition.iter_markers("parametrize")
    )
    if "case" in metafunc.fixturenames and not own:
        metafunc.parametrize("case", CASES, ids=[c.id for c in CASES])


@pytest.fixture(scope="session")
def all_cases() -> list[Case]:
    return CASES
