"""The blocking WebSocket stream against the real service."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _clientkit import FUSION, SPARSE
from _server import free_port

from committee_client import (
    Client,
    Conflict,
    ConnectionFailed,
    InvalidInput,
    Job,
    Labelled,
    Learned,
    Model,
    NotFound,
    Prediction,
)


def sparse_items(n: int, seed: int) -> list[tuple[dict[str, Any], int]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        idx = rng.choice(1000, 8, replace=False)
        out.append(({"features": {str(i): 1.0 for i in idx}}, 1 if idx.min() < 100 else -1))
    return out


def test_calls_and_errors(client: Client, name: str) -> None:
    client.create_model(name, **FUSION)
    with client.stream(name) as s:
        p = s.predict({"experts": {"cnn": "dog"}})
        assert isinstance(p, Prediction) and p.label == "dog" and p.trial_id
        assert s.predict({"experts": {"cnn": "dog"}}, trial_id=p.trial_id) == p
        assert s.predict({"experts": {"knn": "cat"}}, track=False).trial_id is None
        got = s.label(p.trial_id, "bird")
        assert isinstance(got, Labelled) and got.mistake and s.label(p.trial_id, "bird") == got
        with pytest.raises(Conflict):
            s.label(p.trial_id, "cat")
        with pytest.raises(NotFound, match="nope"):
            s.label("nope", "cat")
        with pytest.raises(InvalidInput) as e:
            s.learn({"experts": {"cnn": "dog"}}, "horse")
        assert e.value.field == "label"
        with pytest.raises(InvalidInput) as tid:
            s.predict({}, trial_id="has space")
        assert tid.value.field == "trial_id"
        learned = s.learn({"experts": {"svm": "bird"}}, "bird")
        assert isinstance(learned, Learned) and learned.label == "bird"
    m = client.model(name)
    assert (m.counters.predictions, m.counters.labelled, m.counters.learned) == (1, 1, 1)


def test_learn_many_equals_learn_batch(client: Client, name: str) -> None:
    """Pipelined over the stream, a window at a time: the same answers and the same
    learner as one REST batch."""
    client.create_model(name, **SPARSE)
    client.create_model(name + "b", **SPARSE)
    items = sparse_items(300, 3)
    with client.stream(name, window=16) as s:
        streamed = s.learn_many(items)
    batch = client.learn_batch(name + "b", items)
    assert [o.unwrap() for o in streamed] == [o.unwrap() for o in batch]
    assert client.state(name).state == client.state(name + "b").state


def test_predict_many_then_label_many(client: Client, name: str) -> None:
    client.create_model(name, **SPARSE)
    items = sparse_items(50, 4)
    with client.stream(name, window=4) as s:
        preds = s.predict_many([x for x, _ in items])
        ids = [o.unwrap().trial_id or "" for o in preds]
        assert len(set(ids)) == 50
        pairs = [(t, y) for t, (_, y) in zip(ids, items, strict=True)]
        pairs.append(("missing", 1))
        got = s.label_many(pairs)
    assert [o.unwrap().label for o in got[:-1]] == [y for _, y in items]
    assert got[-1].error is not None and got[-1].error.status == 404
    assert client.model(name).counters.labelled == 50


def test_unknown_model_and_no_service(client: Client, name: str) -> None:
    with client.stream("ghost") as s, pytest.raises(NotFound, match="ghost"):
        s.learn({}, 1)
    client.create_model(name, **SPARSE)
    with client.stream(name) as s:
        s.learn({}, 1)
        client.delete_model(name)
        with pytest.raises(NotFound):
            s.learn({}, 1)
    with pytest.raises(ConnectionFailed) as e, Client(f"http://127.0.0.1:{free_port()}") as c:
        c.stream("m").__enter__()
    assert e.value.sent is False


def test_admin_operations_over_the_stream(client: Client, name: str) -> None:
    client.create_model(name, **FUSION)
    with client.stream(name) as s:
        for _ in range(4):
            s.learn({"experts": {"cnn": "dog", "svm": "cat"}}, "dog")
        grown = s.change_experts(add=["vit"], retire=["svm"])
        assert isinstance(grown, Model) and grown.version == 5
        assert grown.input["experts"]["retired"] == ["svm"]
        assert s.add_labels(["fox"]).labels == ["cat", "dog", "bird", "fox"]
        s.learn({"experts": {"vit": "fox"}}, "fox")
        back = s.rollback(3)
        assert back.version == 8 and back.labels[-1] == "fox"  # what it gained stays
        job = s.backtest(["weighted-majority", FUSION["learner"]], from_version=0, points=4)
        assert isinstance(job, Job) and job.status == "done" and job.result is not None
        assert job.result.resets == [8] and len(job.result.candidates) == 2
        fork = s.fork_model(f"{name}-f", 4, learner="weighted-majority")
        assert fork.learner == {"kind": "weighted-majority"} and fork.labels == FUSION["labels"]
        assert s.fork_model(f"{name}-now").labels[-1] == "fox"
        with pytest.raises(Conflict):
            s.fork_model(f"{name}-f")
        with pytest.raises(InvalidInput) as e:
            s.add_features(["f"])
        assert e.value.field == "features"
        with pytest.raises(InvalidInput) as e:
            s.rollback(99)
        assert e.value.field == "version"
    assert client.model(name).version == 8
