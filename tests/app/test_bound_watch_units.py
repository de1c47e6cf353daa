"""The bound watch as a monitor: its bound against a hand computation, a crossing raised
once and re-armed, no crossing by a real learner on adversarial sequences, runs and single
trials alike, its state read back, and the learners it follows."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest

from app.service.bound_watch import MAX_ALERTS, BoundWatch, rule_of
from app.service.monitors import KINDS, fresh_monitors, read_monitors, relearned
from models.core.instance import Experts
from models.core.learner import Learner
from models.core.state import InvalidState
from models.inputs.space import InputSpace
from models.learners.committee import Committee
from models.learners.fusion import Fusion
from models.learners.perceptron import Perceptron
from models.learners.weighted_majority import WeightedMajority


def _space(n: int, labels: int = 2) -> InputSpace:
    names = [f"e{i}" for i in range(n)]
    return InputSpace([f"c{j}" for j in range(labels)], experts={"expert_names": names})


def _wm(n: int, **params: object) -> WeightedMajority:
    return WeightedMajority(n_experts=n, labels=["c0", "c1"], **params)  # type: ignore[arg-type]


def _perfect_and_wrong(n: int, y: int, wrong: int = 0) -> Experts:
    """Sub-expert 0 votes ``y`` (``1 - y`` when ``wrong``), the others ``1 - y``."""
    return Experts.one_hot([y ^ wrong] + [1 - y] * (n - 1))


def test_the_bound_is_littlestone_and_warmuths_by_hand() -> None:
    # Littlestone & Warmuth: v = 10, beta = 1/2: a perfect expert gives ln 10 / ln(4/3) = 8.00;
    # one of 5 mistakes (ln 10 + 5 ln 2) / ln(4/3) = 20.05
    w = BoundWatch(_space(10), _wm(10))
    assert w.bound() == (pytest.approx(math.log(10) / math.log(4 / 3)), 0)
    assert round(w.bound()[0], 2) == 8.00
    for seq in range(1, 6):  # sub-expert 0 wrong five times, the others always
        w.judged(seq, _perfect_and_wrong(10, 0, wrong=1), 0, 1, 1)
    for seq in range(6, 20):
        w.judged(seq, _perfect_and_wrong(10, 0), 0, 0, 0)
    bound, best = w.bound()
    assert best == 0 and int(w.mistakes[0]) == 5 and int(w.mistakes[1]) == 19
    assert round(bound, 2) == 20.05
    f = w.figures()
    assert f["bound"] == bound and f["mistakes"] == 5 and f["trials"] == 19
    assert f["best"] == {"expert": "expert:e0", "mistakes": 5, "loss": 5.0}


def test_the_floor_the_share_and_committee_forms_by_hand() -> None:
    space = _space(4)
    floor = rule_of(_wm(4, beta=0.3, weight_floor=0.1), space)
    assert floor is not None
    assert floor.divisor == pytest.approx(math.log(1 / (1 - 0.7 * 0.4)))
    every = rule_of(_wm(4, beta=0.3, fixed_share=0.05), space)
    assert every is not None and every.per_trial == pytest.approx(math.log(1 / 0.95))
    assert every.divisor == pytest.approx(math.log(2 / 1.3))
    on_mistake = rule_of(_wm(4, beta=0.3, fixed_share=0.05, update="on_mistake"), space)
    assert on_mistake is not None and on_mistake.per_trial == 0
    assert on_mistake.divisor == pytest.approx(math.log(2 / 1.3) - math.log(1 / 0.95))
    # Committee over two labels, one-hot: Weighted Majority on mistakes, beta = alpha^-2
    committee = rule_of(Committee(n_experts=4, labels=["c0", "c1"], alpha=1.5), space)
    assert committee is not None and committee.one_hot
    assert committee.per_loss == pytest.approx(math.log(1.5**2))
    assert committee.divisor == pytest.approx(math.log(2 / (1 + 1.5**-2)))
    # with every trial sharing: (ln 4 + 0 + 3 ln(1/0.95)) / ln(2/1.3) after 3 trials
    w = BoundWatch(space, _wm(4, beta=0.3, fixed_share=0.05))
    for seq in (1, 2, 3):
        w.judged(seq, _perfect_and_wrong(4, 1), 1, 1, 1)
    expected = (math.log(4) + 3 * math.log(1 / 0.95)) / math.log(2 / 1.3)
    assert w.bound() == (pytest.approx(expected), 0)


def test_the_brier_term_adds_half_brier_scores_to_a_sub_experts_loss() -> None:
    space = _space(2)
    w = BoundWatch(space, Fusion(n_experts=2, labels=["c0", "c1"]))
    x = Experts.from_dense(np.array([[0.8, 0.2], [0.4, 0.6]]))
    w.judged(1, x, 0, 0, 0)
    # sub-expert 0: right, half Brier ((0.8 - 1)^2 + 0.2^2) / 2 = 0.04; 1: wrong, 0.36
    assert w.losses.tolist() == pytest.approx([0.04, 1.36])
    per_loss, divisor = math.log(2), -math.log(1 - 0.5 * 0.49)
    assert w.bound() == (pytest.approx((math.log(2) + 0.04 * per_loss) / divisor), 0)


def test_a_crossing_is_alerted_once_and_the_watch_rearms_under_the_bound() -> None:
    # a learner-mistake stream fed directly: every trial a mistake, one perfect expert
    w = BoundWatch(_space(10), _wm(10))
    limit = math.log(10) / math.log(4 / 3)  # 8.0039
    for seq in range(1, 30):
        w.judged(seq, _perfect_and_wrong(10, 0), 0, 1, 1)
    [alert] = w.alerts
    assert alert["kind"] == "bound" and alert["what"] == "bound"
    assert alert["seq"] == math.floor(limit) + 1 and alert["mistakes"] == alert["seq"]
    assert alert["bound"] == pytest.approx(limit) and alert["best"] == "expert:e0"
    assert alert["best_mistakes"] == 0 and alert["since"] == 1 and w.figures()["over"]
    # the best expert errs while the learner is right: the bound passes the 29 mistakes
    seq = 30
    while w.bound()[0] < w.own:
        w.judged(seq, _perfect_and_wrong(10, 1), 0, 0, 0)  # every sub-expert wrong
        seq += 1
    assert not w.over and len(w.alerts) == 1
    while len(w.alerts) == 1:  # and the next crossing is a second alert
        w.judged(seq, _perfect_and_wrong(10, 0), 0, 1, 1)
        seq += 1
    assert w.alerts[1]["mistakes"] > w.alerts[1]["bound"] >= 29


def _adversary(learner: Learner, w: BoundWatch, xs: list[Experts]) -> int:
    """Feed the learner and the watch trials whose label is never the learner's
    prediction; the learner's mistakes."""
    k = w.space.n_classes
    labels = list(w.space.labels)
    for seq, x in enumerate(xs, 1):
        p = labels.index(learner.predict(x))
        y = (p + 1) % k
        own, _ = learner.trial(x, labels[y])
        assert own == p
        w.judged(seq, x, y, own, own)
    return w.own


def _one_hot_stream(rng: np.random.Generator, n: int, k: int, size: int) -> list[Experts]:
    return [Experts.one_hot(rng.integers(0, k, n).tolist()) for _ in range(size)]


def _probability_stream(rng: np.random.Generator, n: int, k: int, size: int) -> list[Experts]:
    votes = 0.999 * rng.dirichlet(np.ones(k), (size, n)) + 1e-3 / k  # within [0, 1]
    return [Experts.from_dense(v) for v in votes]


@pytest.mark.parametrize(
    ("make", "votes", "k"),
    [
        (lambda n: WeightedMajority(n_experts=n, labels=["c0", "c1"]), "one-hot", 2),
        (lambda n: WeightedMajority(n_experts=n, labels=["c0", "c1", "c2"], beta=0.2), "p", 3),
        (lambda n: WeightedMajority(n_experts=n, labels=["c0", "c1"], weight_floor=0.2), "p", 2),
        (lambda n: WeightedMajority(n_experts=n, labels=["c0", "c1"], fixed_share=0.1), "p", 2),
        (
            lambda n: WeightedMajority(
                n_experts=n, labels=["c0", "c1"], update="on_mistake", fixed_share=0.02
            ),
            "one-hot",
            2,
        ),
        (lambda n: Fusion(n_experts=n, labels=["c0", "c1", "c2"]), "p", 3),
        (lambda n: Committee(n_experts=n, labels=["c0", "c1"], alpha=1.3), "one-hot", 2),
    ],
)
def test_a_real_learner_on_an_adversarial_sequence_never_crosses(
    make: object, votes: str, k: int
) -> None:
    rng = np.random.default_rng(7)
    n = 12
    learner = make(n)  # type: ignore[operator]
    space = _space(n, k)
    assert KINDS["bound"].follows(space, "experts", learner)
    w = BoundWatch(space, learner)
    stream = _one_hot_stream if votes == "one-hot" else _probability_stream
    xs = stream(rng, n, k, 1_500)
    assert _adversary(learner, w, xs) == 1_500  # wrong every trial, by construction
    assert w.alerts == [] and w.suspended is None and w.bound()[0] >= 1_500


def test_runs_and_single_trials_give_the_same_watch() -> None:
    rng = np.random.default_rng(3)
    ys = rng.integers(0, 3, 900).tolist()
    ps = [(y + 1) % 3 for y in ys]  # every trial a mistake
    xs = _probability_stream(rng, 6, 3, 900)
    for t in range(900):  # sub-expert 0 right on two trials in three: crossings
        if t % 3 == 0:
            continue
        dense = xs[t].dense(6, 3)
        dense[0] = np.eye(3)[ys[t]]
        xs[t] = Experts.from_dense(dense)
    space = _space(6, 3)
    one, runs = (BoundWatch(space, Fusion(n_experts=6, labels=["c0", "c1", "c2"])) for _ in "ab")
    for seq, (x, y, p) in enumerate(zip(xs, ys, ps, strict=True), 1):
        one.judged(seq, x, y, p, p)
    at = 0
    for size in rng.integers(1, 200, 100).tolist():
        runs.judged_run(at + 1, xs[at : at + size], ys[at : at + size], ps[at : at + size])
        at += size
        if at >= 900:
            break
    assert at >= 900 and one.alerts and orjson.dumps(runs.export()) == orjson.dumps(one.export())


def test_the_state_round_trips_and_the_watch_goes_on_alike() -> None:
    space, learner = _space(10), _wm(10)
    w = BoundWatch(space, learner)
    for seq in range(1, 12):
        w.judged(seq, _perfect_and_wrong(10, seq % 2, wrong=seq % 3 == 0), seq % 2, 0, 1)
    doc = orjson.loads(orjson.dumps(w.export()))
    back = read_monitors({"bound": doc}, space, "experts", learner)["bound"]
    assert isinstance(back, BoundWatch) and back.export() == w.export()
    for seq in range(12, 40):
        for watch in (w, back):
            watch.judged(seq, _perfect_and_wrong(10, 0), 0, 1, 1)
    assert back.export() == w.export() and len(w.alerts) == 1
    # another beta (a rollback past a promote): a run from there, the alerts kept
    other = read_monitors({"bound": doc}, space, "experts", _wm(10, beta=0.4))["bound"]
    assert isinstance(other, BoundWatch)
    assert other.trials == 0 and other.since is None and other.alerts == doc["alerts"]


def test_a_state_that_does_not_fit_is_refused() -> None:
    space, learner = _space(3), _wm(3)
    w = BoundWatch(space, learner)
    w.judged(1, _perfect_and_wrong(3, 0), 0, 1, 1)
    doc = orjson.loads(orjson.dumps(w.export()))
    for bad in (
        {**doc, "version": 2},
        {**doc, "own": 5},
        {**doc, "trials": -1},
        {**doc, "over": 1},
        {**doc, "alerts": [{"seq": 1}]},
        {**doc, "alerts": [doc["alerts"]] * (MAX_ALERTS + 1)},
        {**doc, "offsets": BoundWatch(_space(4), _wm(4)).export()["offsets"]},
        {k: v for k, v in doc.items() if k != "losses"},
    ):
        with pytest.raises(InvalidState):
            BoundWatch.read(bad, space, learner)


def test_it_follows_only_the_learners_with_a_bound() -> None:
    follows = KINDS["bound"].follows
    two, three = _space(4), _space(4, 3)
    labels2 = ["c0", "c1"]
    assert follows(two, "experts", _wm(4))
    assert follows(two, "experts", Fusion(n_experts=4, labels=labels2))
    assert follows(two, "experts", _wm(4, weight_floor=0.3))
    assert follows(two, "experts", Committee(n_experts=4, labels=labels2))
    # no proven bound: both tracking options, a floor of 1/2, a share too large on mistakes,
    # Committee over three labels or with an option, learners of other kinds
    assert not follows(two, "experts", _wm(4, weight_floor=0.1, fixed_share=0.1))
    assert not follows(two, "experts", _wm(4, weight_floor=0.5))
    assert not follows(two, "experts", _wm(4, beta=0.5, fixed_share=0.3, update="on_mistake"))
    assert not follows(three, "experts", Committee(n_experts=4, labels=["c0", "c1", "c2"]))
    assert not follows(two, "experts", Committee(n_experts=4, labels=labels2, weight_floor=0.1))
    attributes = InputSpace(labels2, attributes={"n_features": 4})
    assert not follows(attributes, "attributes", Perceptron(n_features=4, labels=labels2))
    assert "bound" not in fresh_monitors(attributes, "attributes", Perceptron(n_features=4))
    assert "bound" in fresh_monitors(two, "experts", _wm(4))


def test_a_trial_outside_the_premise_suspends_the_run_until_the_learner_changes() -> None:
    space = _space(3)
    w = BoundWatch(space, _wm(3))
    w.judged(1, Experts.one_hot([0, 1, 0]), 0, 0, 0)
    w.judged(2, Experts([0, 1], [0, 0], [1.0, 1.0]), 0, 1, 1)  # sub-expert 2 abstains
    assert w.suspended == {"seq": 2, "why": "a sub-expert did not vote"}
    for seq in range(3, 30):
        w.judged(seq, Experts.one_hot([0, 0, 0]), 0, 1, 1)
    assert w.alerts == [] and w.figures()["bound"] is None
    c = Committee(n_experts=3, labels=["c0", "c1"])
    cw = BoundWatch(space, c)
    cw.judged(1, Experts.from_dense(np.array([[0.7, 0.3]] * 3)), 0, 0, 0)
    assert cw.suspended is not None and "one label" in cw.suspended["why"]


def test_a_changed_learner_starts_a_run_from_its_weights() -> None:
    space = _space(3)
    learner = _wm(3)
    monitors = fresh_monitors(space, "experts", learner)
    w = monitors["bound"]
    assert isinstance(w, BoundWatch)
    for seq in range(1, 6):
        x = Experts.one_hot([0, 1, 1])
        own, _ = learner.trial(x, "c0")
        w.judged(seq, x, 0, own, own)
    # weights 1, 1/32, 1/32: c_i = ln(W / w_i) from them
    after = relearned(monitors, space, "experts", learner)
    assert after["bound"] is w and w.trials == 0 and w.own == 0
    total = 1 + 2 / 32
    assert w.offsets.tolist() == pytest.approx([math.log(total), *[math.log(32 * total)] * 2])
    # a learner without a bound: the watch leaves
    gone = relearned(monitors, space, "experts", _wm(3, weight_floor=0.1, fixed_share=0.1))
    assert "bound" not in gone and "drift" in gone
