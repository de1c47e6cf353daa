"""The drift watch as a monitor: what it records is a function of the trials it is fed,
one by one or in compiled runs alike, and of its state read back."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from app.core.errors import BadInput
from app.core.settings import Settings
from app.service.alerts import check_config
from app.service.drift_watch import EXPERT_WATCH, MAX_ALERTS, RECENT, DriftWatch, Stream
from app.service.monitors import KINDS, fresh_monitors, read_monitors
from models.core.instance import Attributes, Experts
from models.core.state import InvalidState
from models.drift import STEP_DELAY, PageHinkley
from models.inputs.space import InputSpace
from models.learners.perceptron import Perceptron

DELAY = STEP_DELAY["page-hinkley"]
X = Attributes.from_mapping({0: 1.0})


def _attributes() -> InputSpace:
    return InputSpace(["a", "b"], attributes={"n_features": 2})


def _experts(names: list[str]) -> InputSpace:
    return InputSpace(["a", "b"], experts={"expert_names": names})


def _step(rng: np.random.Generator, n: int, before: float, after: float, at: int) -> np.ndarray:
    return np.r_[rng.random(at) < before, rng.random(n - at) < after].astype(np.uint8)


def _feed(w: DriftWatch, bits: np.ndarray, first: int = 1) -> None:
    for seq, bit in enumerate(bits.tolist(), first):
        w.judged(seq, X, 0, bit, bit)


def test_every_model_has_a_drift_watch() -> None:
    assert "drift" in KINDS
    learner = Perceptron(n_features=2, labels=["a", "b"])
    assert isinstance(fresh_monitors(_attributes(), "attributes", learner)["drift"], DriftWatch)


def test_a_rise_is_alerted_within_the_documented_delay_with_the_rates_around_it() -> None:
    rng = np.random.default_rng(0)
    bits = _step(rng, 6_000, 0.1, 0.4, 4_000)
    w = DriftWatch(_attributes(), "attributes")
    _feed(w, bits, first=1)
    [alert] = w.alerts
    assert alert["what"] == "model" and alert["kind"] == "drift"
    assert 4_001 <= alert["seq"] < 4_001 + DELAY
    assert abs(alert["before"] - 0.1) < 0.03 and alert["after"] > 0.25
    assert alert["since"] == alert["seq"] - RECENT + 1
    assert alert["trials"] == alert["seq"]
    # the detector is models.drift's at its defaults: it fires where that one does
    assert PageHinkley().update_many(bits).tolist()[0] + 1 == alert["seq"]


def test_a_fall_of_the_error_rate_raises_nothing() -> None:
    w = DriftWatch(_attributes(), "attributes")
    _feed(w, _step(np.random.default_rng(1), 6_000, 0.4, 0.1, 2_000))
    assert w.alerts == []


@pytest.mark.parametrize("error", [0.05, 0.25, 0.5])
def test_no_alert_on_100_000_stationary_trials(error: float) -> None:
    w = DriftWatch(_attributes(), "attributes")
    bits = (np.random.default_rng(2).random(100_000) < error).astype(np.uint8)
    ys = np.zeros(bits.size, dtype=np.int64)
    for at in range(0, bits.size, 1_000):
        w.judged_run(at + 1, [X] * 1_000, ys[at : at + 1_000], bits[at : at + 1_000])
    assert w.alerts == [] and w.model.trials == 100_000


def test_runs_and_single_trials_give_the_same_watch() -> None:
    bits = _step(np.random.default_rng(3), 9_000, 0.1, 0.45, 3_000)
    one = DriftWatch(_attributes(), "attributes")
    _feed(one, bits)
    runs = DriftWatch(_attributes(), "attributes")
    at, sizes = 0, np.random.default_rng(4).integers(1, 700, 100)
    for n in sizes.tolist():
        part = bits[at : at + n]
        runs.judged_run(at + 1, [X] * len(part), [0] * len(part), part.tolist())
        at += len(part)
        if at >= bits.size:
            break
    assert at == bits.size and one.alerts and runs.export() == one.export()


def test_the_state_round_trips_and_the_watch_goes_on_alike() -> None:
    bits = _step(np.random.default_rng(5), 8_000, 0.1, 0.4, 3_000)
    w = DriftWatch(_attributes(), "attributes")
    _feed(w, bits[:3_100])
    doc = orjson.loads(orjson.dumps(w.export()))
    learner = Perceptron(n_features=2, labels=["a", "b"])
    back = read_monitors({"drift": doc}, _attributes(), "attributes", learner)["drift"]
    assert isinstance(back, DriftWatch) and back.export() == w.export()
    _feed(w, bits[3_100:], first=3_101)
    _feed(back, bits[3_100:], first=3_101)
    assert back.export() == w.export() and len(w.alerts) == 1


def test_a_state_that_does_not_fit_is_refused() -> None:
    w = DriftWatch(_attributes(), "attributes")
    _feed(w, np.ones(10, dtype=np.uint8))
    doc = w.export()
    for bad in (
        {**doc, "version": 2},
        {**doc, "model": {**doc["model"], "mistakes": 11}},
        {**doc, "model": {**doc["model"], "recent": "zz"}},
        {**doc, "model": {**doc["model"], "seqs": [1, 2]}},
        {**doc, "experts": [doc["model"]]},
        {**doc, "alerts": [{"seq": "1"}]},
    ):
        with pytest.raises(InvalidState):
            DriftWatch.read(bad, _attributes(), "attributes")


def test_each_expert_is_judged_by_its_top_vote_and_not_when_it_abstains() -> None:
    space = _experts(["good", "bad", "quiet"])
    w = DriftWatch(space, "experts")
    assert w.names == ["expert:good", "expert:bad", "expert:quiet"]
    rng = np.random.default_rng(6)
    for seq in range(1, 4_001):
        y = int(rng.integers(2))
        wrong = rng.random() < (0.1 if seq <= 2_000 else 0.45)
        bad = 1 - y if wrong else y
        # good votes y most, bad votes its label most; quiet abstains
        x = Experts([0, 0, 1, 1], [y, 1 - y, bad, 1 - bad], [0.8, 0.2, 0.9, 0.1])
        w.judged(seq, x, y, y, y)
    good, bad, quiet = w.experts
    assert good.trials == 4_000 and bad.trials == 4_000 - sum(a["trials"] for a in w.alerts)
    assert quiet.trials == 0 and good.mistakes == 0
    assert [a["what"] for a in w.alerts] == ["expert:bad"]
    assert 2_001 <= w.alerts[0]["seq"] < 2_001 + DELAY


def test_experts_joining_are_watched_and_too_many_are_not() -> None:
    space = _experts(["a"])
    w = DriftWatch(space, "experts")
    bigger = space.changed({"experts": {"add": ["b"]}})
    w.grown(bigger)
    assert w.names == ["expert:a", "expert:b"] and len(w.experts) == 2
    many = bigger.changed({"experts": {"add": [f"e{i}" for i in range(EXPERT_WATCH)]}})
    w.grown(many)
    assert w.experts == [] and w.names == []


def test_alerts_kept_are_the_latest() -> None:
    w = DriftWatch(_attributes(), "attributes")
    rng = np.random.default_rng(8)
    seq = 1
    for _ in range(MAX_ALERTS + 3):  # each segment: quiet, then a rise
        bits = _step(rng, 1_200, 0.0, 0.9, 200)
        _feed(w, bits, first=seq)
        seq += bits.size
    assert len(w.alerts) == MAX_ALERTS
    seqs = [a["seq"] for a in w.alerts]
    assert seqs == sorted(seqs)


def test_a_stream_restarts_after_each_alert() -> None:
    s = Stream(seqs=True)
    fired = [a for i in range(2_000) if (a := s.step(i, i >= 500))]
    assert len(fired) >= 1 and s.trials < 2_000


def test_the_webhook_host_is_checked_against_the_allow_list() -> None:
    none, some = Settings(), Settings(alert_allowed_hosts="hooks.example.com,127.0.0.1:*")
    with pytest.raises(BadInput) as e:
        check_config({"webhook_url": "https://hooks.example.com/x"}, none)
    assert e.value.field == "webhook_url" and "COMMITTEE_ALERT_ALLOWED_HOSTS" in str(e.value)
    ok = check_config({"webhook_url": "https://hooks.example.com/x"}, some)
    assert ok == {"webhook_url": "https://hooks.example.com/x", "rollback": False}
    assert check_config({"webhook_url": "http://127.0.0.1:8080/"}, some)["webhook_url"]
    for bad in (
        "http://10.0.0.1/",
        "ftp://hooks.example.com/",
        "https://u:p@hooks.example.com/",
        "https://hooks.example.com.evil/",
    ):
        with pytest.raises(BadInput):
            check_config({"webhook_url": bad}, some)
    assert check_config({"rollback": True}, none) == {"webhook_url": None, "rollback": True}


def test_runs_of_expert_trials_give_the_same_watch_as_single_ones() -> None:
    space = _experts(["p", "q"])
    rng = np.random.default_rng(9)
    trials = []
    for seq in range(1, 3_001):
        y = int(rng.integers(2))
        vote = 1 - y if rng.random() < (0.1 if seq <= 1_500 else 0.45) else y
        trials.append((Experts([0, 1], [vote, y], [1.0, 1.0]), y, vote))
    one, runs = DriftWatch(space, "experts"), DriftWatch(space, "experts")
    for seq, (x, y, p) in enumerate(trials, 1):
        one.judged(seq, x, y, p, p)
    for at in range(0, len(trials), 250):
        part = trials[at : at + 250]
        runs.judged_run(
            at + 1, [x for x, _, _ in part], [y for _, y, _ in part], [p for *_, p in part]
        )
    assert one.alerts and runs.export() == one.export()
