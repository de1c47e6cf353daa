"""A worker's copy of a model: replay and the outcomes it reports for folding."""

from __future__ import annotations

import orjson
import pytest

from app import live
from app.live import LiveModel
from storage.repository import Sync

CONFIG = {
    "labels": ["a", "b"],
    "input": {"attributes": {"n_features": 4}},
    "learner": {"kind": "balanced-winnow"},
    "label_ttl": 60.0,
}


def payload(m: LiveModel) -> list[int]:
    raw = m.fold_payload()
    if not raw:
        return []
    doc = orjson.loads(raw)
    return list(range(doc["a"], doc["a"] + len(doc["e"])))


def test_outcomes_are_sent_once_and_again_when_unacknowledged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(live.time, "monotonic", lambda: now[0])
    m = LiveModel("m", "inc", CONFIG)
    x = m.encode({"features": [1, 0, 1, 0]})
    m.apply_own(1, [(x, 0), (x, 1), (x, 0)])
    assert payload(m) == [1, 2, 3]
    assert payload(m) == []  # in flight: not sent twice
    m.apply_own(4, [(x, 1)])
    assert payload(m) == [4]
    m.acknowledge(Sync(version=4, folded=2, entries=[]))
    assert sorted(m.unfolded) == [3, 4]
    assert payload(m) == []
    now[0] += live.RESEND + 0.1  # still not folded a while later: send again
    assert payload(m) == [3, 4]
    m.acknowledge(Sync(version=4, folded=4, entries=[]))
    assert m.unfolded == {} and payload(m) == []
