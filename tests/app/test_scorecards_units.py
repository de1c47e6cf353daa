"""The scorecards monitor (app.service.scorecards) on its own: known answers, a count
made here from the scores, growth of the input, its state and the states it refuses."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from app.service.live_model import LiveModel
from app.service.monitors import KINDS
from app.service.scorecards import KIND, NAME, SPARK_BLOCK, WINDOW, Scorecards
from models.core.instance import Experts
from models.core.state import InvalidState, encode_array
from models.inputs.space import InputSpace

LABELS = ["a", "b", "c"]


def space(**experts: Any) -> InputSpace:
    return InputSpace(LABELS, experts={"expert_names": ["x", "y", "z"], **experts})


def judge(m: Scorecards, sp: InputSpace, votes: dict[str, Any], y: int, served: int) -> None:
    m.judged(0, sp.encode({"experts": votes}, "experts"), y, served, served)


def top(scores: list[float], zeros: bool = True) -> int | None:
    """The highest score's label, ties to the first; None for all zeros when ``zeros``
    (raw and sum-to-one scores: all zeros leave no vote)."""
    return None if zeros and not any(scores) else scores.index(max(scores))


def test_known_answers() -> None:
    sp = space(normalize="raw")
    m = Scorecards(sp)
    judge(m, sp, {"x": [1, 3, 3], "y": {"a": -1}, "z": None}, y=1, served=2)
    judge(m, sp, {"x": [0, 0, 0], "y": [-2, -1, -3], "z": "c"}, y=0, served=0)
    x, y, z = m.cards()
    # x: a tie of b and c goes to b (right; not what was served); then all zeros: abstains
    assert (x["trials"], x["mistakes"], x["agreed"]) == (1, 0, 0)
    assert x["confusion"] == {"b": {"b": 1}}
    # y: -1 for a, the others 0: b (the first left out); then all below 0: b again
    assert (y["trials"], y["mistakes"], y["agreed"]) == (2, 1, 0)
    assert y["confusion"] == {"b": {"b": 1}, "a": {"b": 1}}
    assert y["recent"] == {"trials": 2, "mistakes": 1, "error_rate": 0.5}
    assert y["spark"] == [0.5] and y["error_rate"] == 0.5 and y["agreement"] == 0.0
    # z abstains (null), then votes c
    assert (z["trials"], z["mistakes"], z["agreed"], z["agreement"]) == (1, 1, 0, 0.0)
    assert z["confusion"] == {"a": {"c": 1}} and not z["retired"]
    assert m.figures() == {"scorecards": m.cards()}


@pytest.mark.parametrize(
    "experts",
    [
        {"normalize": "raw"},
        {"normalize": ["sum-to-one", "rank", "argmax"]},
        {"normalize": "rank", "combinations": {"size": 3, "by": ["score", "rank"]}},
        {"normalize": "sum-to-one", "split_classes": "all", "threshold_experts": True},
    ],
)
def test_the_count_of_a_stream(experts: dict[str, Any]) -> None:
    """Over more trials than the window, each classifier's figures are those counted
    here from its scores, whatever the input adds beside its own votes."""
    sp = space(**experts)
    m = Scorecards(sp)
    rng = np.random.default_rng(len(str(experts)))
    counted: dict[str, dict[str, Any]] = {
        n: {"verdicts": [], "agreed": 0, "confusion": {}} for n in sp.expert_names
    }
    negative = experts["normalize"] == "raw"
    first = experts["normalize"] if isinstance(experts["normalize"], str) else "sum-to-one"
    zeros = first in ("raw", "sum-to-one")
    for _ in range(WINDOW + 600):
        y, served = int(rng.integers(3)), int(rng.integers(3))
        votes = {}
        for name in sp.expert_names:
            if rng.random() < 0.15:
                continue
            scores = rng.integers(-2 if negative else 0, 3, size=3)
            given = rng.random(3) < 0.7  # the labels left out score 0
            votes[name] = {LABELS[c]: int(scores[c]) for c in np.flatnonzero(given)}
            t = top(np.where(given, scores, 0).tolist(), zeros) if given.any() else None
            if t is not None:
                c = counted[name]
                c["verdicts"].append(t != y)
                c["agreed"] += t == served
                row = c["confusion"].setdefault(LABELS[y], {})
                row[LABELS[t]] = row.get(LABELS[t], 0) + 1
        judge(m, sp, votes, y, served)
    for card in m.cards():
        c = counted[card["expert"]]
        recent = c["verdicts"][-WINDOW:]
        assert card["trials"] == len(c["verdicts"]) > WINDOW
        assert card["mistakes"] == sum(c["verdicts"])
        assert card["agreed"] == c["agreed"]
        assert card["confusion"] == c["confusion"]
        assert card["recent"] == {
            "trials": WINDOW,
            "mistakes": sum(recent),
            "error_rate": sum(recent) / WINDOW,
        }
        blocks = [recent[a : a + SPARK_BLOCK] for a in range(0, WINDOW, SPARK_BLOCK)]
        assert card["spark"] == [sum(b) / len(b) for b in blocks]


def test_the_confusion_table_grows() -> None:
    """Many distinct (expert, label, top vote) keys: the table grows, nothing is lost."""
    labels = list(range(40))
    sp = InputSpace(labels, experts={"expert_names": ["p", "q"]})
    m = Scorecards(sp)
    rng = np.random.default_rng(3)
    want: dict[tuple[str, str, str], int] = {}
    for _ in range(3_000):
        y, votes = int(rng.integers(40)), {"p": int(rng.integers(40)), "q": int(rng.integers(40))}
        m.judged(0, sp.encode({"experts": votes}, "experts"), y, 0, 0)
        for name, t in votes.items():
            key = (name, str(y), str(t))
            want[key] = want.get(key, 0) + 1
    got = {
        (card["expert"], y, t): n
        for card in m.cards()
        for y, row in card["confusion"].items()
        for t, n in row.items()
    }
    assert got == want and m.table_.shape[1] > 2 * len(want) > 1_000
    again = Scorecards.read(orjson.loads(orjson.dumps(m.export())), sp)
    assert again.cards() == m.cards()


def test_the_input_grows() -> None:
    """A classifier added starts empty and is judged from then on; a retired one is
    judged no more; a label added is counted under its name."""
    sp = space(normalize="sum-to-one", combinations={"size": 2, "by": "score"})
    m = Scorecards(sp)
    judge(m, sp, {"x": "a", "y": "b", "z": "a"}, 0, 0)
    sp2 = sp.changed({"experts": {"add": ["w"], "retire": ["y"]}, "labels": {"add": ["d"]}})
    m.grown(sp2)
    judge(m, sp2, {"x": "d", "z": "a", "w": "d"}, 3, 3)
    judge(m, sp2, {"w": [0, 0, 1, 2]}, 2, 3)
    cards = {card["expert"]: card for card in m.cards()}
    assert list(cards) == ["x", "y", "z", "w"]
    assert cards["y"]["retired"] and cards["y"]["trials"] == 1
    assert cards["x"]["confusion"] == {"a": {"a": 1}, "d": {"d": 1}}
    assert cards["w"]["confusion"] == {"d": {"d": 1}, "c": {"d": 1}}
    assert (cards["w"]["trials"], cards["w"]["mistakes"], cards["w"]["agreed"]) == (2, 1, 2)
    assert Scorecards.read(m.export(), sp2).cards() == m.cards()


def test_state_round_trip_carries_on_alike() -> None:
    sp = space(normalize="raw")
    m = Scorecards(sp)
    rng = np.random.default_rng(5)
    stream = [
        ({n: rng.integers(-1, 3, size=3).tolist() for n in "xyz"}, int(rng.integers(3)))
        for _ in range(1_500)
    ]
    for votes, y in stream[:1_200]:
        judge(m, sp, votes, y, y)
    doc = orjson.loads(orjson.dumps(m.export()))
    again = Scorecards.read(doc, sp)
    assert again.cards() == m.cards()
    for votes, y in stream[1_200:]:
        judge(m, sp, votes, y, 1)
        judge(again, sp, votes, y, 1)
    assert again.cards() == m.cards()
    assert orjson.dumps(again.export()) == orjson.dumps(m.export())


def _doc() -> tuple[InputSpace, dict[str, Any]]:
    sp = space(normalize="raw")
    m = Scorecards(sp)
    for y in range(3):
        judge(m, sp, {"x": "a", "y": "b", "z": "c"}, y, 0)
    return sp, orjson.loads(orjson.dumps(m.export()))


def _counts(rows: list[list[int]]) -> dict[str, Any]:
    return encode_array(np.array(rows, dtype=np.int64))


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"version": 2}, "version"),
        ({"experts": ["x", "y"]}, "experts"),
        ({"window": 10}, "window"),
        ({"counts": _counts([[3, 2, 1], [3, 2, 1]])}, "shape"),
        ({"counts": _counts([[3, 4, 1], [3, 2, 0], [3, 2, 0]])}, "mistakes"),
        ({"counts": _counts([[3, 2, 1], [3, 2, 0], [4, 2, 0]])}, "sums"),
        ({"recent": encode_array(np.ones((3, WINDOW), dtype=np.bool_))}, "beyond"),
        ({"recent": encode_array(np.zeros((3, WINDOW)))}, "dtype"),
        ({"confusion": _counts([[0, 0, 0, 1], [0, 0, 0, 1]])}, "sorted"),
        ({"confusion": _counts([[0, 0, 5, 1]])}, "class"),
        ({"confusion": _counts([[0, 0, 0, 0]])}, "n > 0"),
        ({"counts": "AAAA"}, "counts"),
        ({"extra": 1}, "expected an object"),
    ],
)
def test_states_that_do_not_fit_are_refused(change: dict[str, Any], says: str) -> None:
    sp, doc = _doc()
    Scorecards.read(doc, sp)  # the document as it is fits
    with pytest.raises(InvalidState, match=says):
        Scorecards.read({**doc, **change}, sp)
    with pytest.raises(InvalidState):
        Scorecards.read([doc], sp)
    with pytest.raises(InvalidState, match="experts"):
        Scorecards.read(doc, sp.changed({"experts": {"add": ["w"]}}))


def test_registered_and_kept_in_a_live_models_snapshot() -> None:
    assert KINDS[NAME] is KIND
    fusion = {
        "labels": LABELS,
        "input": {"experts": {"expert_names": ["x", "y", "z"]}},
        "learner": {"kind": "fusion"},
        "label_ttl": 60,
    }
    plain = {
        **fusion,
        "input": {"attributes": {"n_features": 2}},
        "learner": {"kind": "multiclass-winnow"},
    }
    assert NAME not in LiveModel("p", "i", plain).monitors
    m = LiveModel("f", "i", fusion)
    mon = m.monitors[NAME]
    assert isinstance(mon, Scorecards)
    judge(mon, m.space, {"x": "a", "y": "b"}, 0, 0)
    again = LiveModel("f", "i", fusion, version=1, state=m.kept_state())
    assert again.monitors[NAME].figures() == mon.figures()


@pytest.mark.parametrize("rows", [1, 7, 300])
def test_a_run_judged_together_is_the_trials_judged_one_by_one(rows: int) -> None:
    """Trials that are rows of one batch are judged in one compiled call, in runs of
    ``rows``, with the cards, the confusion counts and the state that judging each gives,
    the table growing between rows as it must (many distinct keys)."""
    labels = list(range(30))
    names = [f"e{i}" for i in range(6)]
    sp = InputSpace(labels, experts={"expert_names": names})
    rng = np.random.default_rng(rows)
    n = 900
    scores = rng.random((n, len(names), len(labels))) * (rng.random((n, len(names), 1)) < 0.8)
    e, c = np.nonzero(scores.reshape(n * len(names), len(labels)))
    flat = scores.reshape(n * len(names), len(labels))[e, c]
    sub = e % len(names)  # each classifier's votes are its sub-expert's
    t = e // len(names)
    ptr = np.searchsorted(t, np.arange(n + 1))
    sizes = np.full(n, len(names))
    classes = np.full(n, len(labels))
    low, high = np.zeros(n), np.ones(n)
    xs = Experts.rows(
        sub.astype(np.int64), c.astype(np.int64), flat, ptr, sizes, classes, low, high
    )
    ys = rng.integers(len(labels), size=n).tolist()
    served = rng.integers(len(labels), size=n).tolist()
    together, alone = Scorecards(sp), Scorecards(sp)
    for a in range(0, n, rows):
        together.judged_run(a, xs[a : a + rows], ys[a : a + rows], served[a : a + rows])
    for i, (x, y, p) in enumerate(zip(xs, ys, served, strict=True)):
        alone.judged(i, x, y, p, p)
    assert together.cards() == alone.cards()
    assert orjson.dumps(together.export(), option=orjson.OPT_SERIALIZE_NUMPY) == orjson.dumps(
        alone.export(), option=orjson.OPT_SERIALIZE_NUMPY
    )
    assert sum(c["trials"] for c in together.cards()) > n  # every classifier judged
    assert together.used_ > 1_000  # the table grew several times
