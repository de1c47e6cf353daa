"""The REST API over HTTP: models, trials, exactly-once labels, errors, state."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import numpy as np
import pytest

from app.service.live_model import build_model
from models.inputs.datasets import MajorityProblem

FUSION = {
    "labels": ["cat", "dog", "bird"],
    "input": {"experts": {"expert_names": ["cnn", "svm", "knn"], "normalize": "sum-to-one"}},
    "learner": {"kind": "committee", "alpha": 1.5},
}
SPARSE = {
    "labels": [1, -1],
    "input": {"attributes": {"n_features": 1000}},
    "learner": {"kind": "balanced-winnow", "alpha": 1.2},
}


def create(client: httpx.Client, name: str, body: dict[str, Any], **extra: Any) -> dict[str, Any]:
    r = client.post("/v1/models", json={"name": name, **body, **extra})
    assert r.status_code == 201, r.text
    return dict(r.json())


def detail(r: httpx.Response) -> str:
    return str(r.json()["detail"])


def wait_folded(client: httpx.Client, name: str) -> dict[str, Any]:
    """The model once every applied trial is counted."""
    deadline = time.monotonic() + 10
    while True:
        m = client.get(f"/v1/models/{name}").json()
        if m["folded"] == m["version"]:
            return dict(m)
        if time.monotonic() > deadline:
            pytest.fail(f"{name}: {m['folded']} of {m['version']} trials counted after 10 s")
        time.sleep(0.02)


def votes(rng: np.random.Generator) -> dict[str, Any]:
    labels = FUSION["labels"]
    return {e: {lab: float(rng.random()) for lab in labels} for e in ("cnn", "svm", "knn")}


# -- models ----------------------------------------------------------------------------


def test_create_read_list_delete(client: httpx.Client, model_name: str) -> None:
    m = create(client, model_name, FUSION)
    assert m["name"] == model_name and m["version"] == 0
    assert m["labels"] == FUSION["labels"] and m["label_ttl"] == 86400
    assert m["counters"]["mistakes"] == 0
    assert model_name in [x["name"] for x in client.get("/v1/models").json()["models"]]
    assert client.get(f"/v1/models/{model_name}").json()["learner"] == FUSION["learner"]
    r = client.post("/v1/models", json={"name": model_name, **FUSION})
    assert r.status_code == 409 and "already exists" in detail(r)
    assert client.delete(f"/v1/models/{model_name}").status_code == 204
    assert client.get(f"/v1/models/{model_name}").status_code == 404
    assert client.delete(f"/v1/models/{model_name}").status_code == 404
    r = client.post(f"/v1/models/{model_name}/predict", json={"instance": {}})
    assert r.status_code == 404 and model_name in detail(r)


def test_recreated_model_starts_afresh(client: httpx.Client, model_name: str) -> None:
    create(client, model_name, SPARSE)
    x = {"features": {"3": 1.0}}
    client.post(f"/v1/models/{model_name}/learn", json={"instance": x, "label": -1})
    client.delete(f"/v1/models/{model_name}")
    create(client, model_name, SPARSE)
    r = client.post(f"/v1/models/{model_name}/learn", json={"instance": x, "label": -1})
    assert r.status_code == 200
    assert client.get(f"/v1/models/{model_name}").json()["version"] == 1


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"learner": {"kind": "nope"}}, "kind", "one of"),
        ({"learner": {"kind": "committee", "alpha": 0.5}}, "alpha", "> 1"),
        ({"learner": {"kind": "committee", "gamma": 1}}, "gamma", "a parameter of committee"),
        ({"learner": {"kind": "winnow"}}, "learner", "takes attributes"),
        ({"labels": ["a", "a"]}, "labels", "distinct"),
        ({"labels": [True, False]}, "labels", "valid string"),
        ({"labels": ["a"]}, "labels", "at least 2"),
        ({"input": {}}, "input", "attributes"),
        ({"input": {"experts": {"expert_names": []}}}, "input", "expert"),
        ({"label_ttl": 0}, "label_ttl", "greater than 0"),
        ({"name": "bad name!"}, "name", "pattern"),
        ({"extra": 1}, "extra", "not permitted"),
    ],
)
def test_bad_model_is_422_naming_the_field(
    client: httpx.Client, model_name: str, change: dict[str, Any], field: str, words: str
) -> None:
    body = {"name": model_name, **FUSION, **change}
    r = client.post("/v1/models", json=body)
    assert r.status_code == 422, r.text
    text = str(r.json()["detail"])
    assert field in text and words in text
    assert client.get(f"/v1/models/{model_name}").status_code == 404


def test_learners_lists_every_kind(client: httpx.Client) -> None:
    kinds = {k["kind"]: k for k in client.get("/v1/learners").json()}
    assert {"winnow", "balanced-winnow", "committee", "alma", "vr-combine", "ecoc"} <= set(kinds)
    alpha = {p["name"]: p for p in kinds["committee"]["parameters"]}["alpha"]
    assert alpha["default"] == 1.2 and "> 1" in alpha["expected"]


def test_health_and_docs(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}
    spec = client.get("/openapi.json").json()
    assert "/v1/models/{name}/label" in spec["paths"]
    assert client.get("/docs").status_code == 200


# -- trials ----------------------------------------------------------------------------


def test_predict_then_label_exactly_once(client: httpx.Client, model_name: str) -> None:
    create(client, model_name, FUSION)
    inst = {"experts": {"cnn": "dog", "svm": {"cat": 3, "dog": 1}}}
    p = client.post(f"/v1/models/{model_name}/predict", json={"instance": inst}).json()
    assert set(p["scores"]) == {"cat", "dog", "bird"} and p["model_version"] == 0
    assert p["label"] == max(p["scores"], key=p["scores"].get)
    url = f"/v1/models/{model_name}/label"
    first = client.post(url, json={"trial_id": p["trial_id"], "label": "bird"})
    assert first.status_code == 200
    answer = first.json()
    assert answer == {
        "trial_id": p["trial_id"],
        "predicted": p["label"],
        "label": "bird",
        "mistake": True,
        "updated": True,
    }
    again = client.post(url, json={"trial_id": p["trial_id"], "label": "bird"})
    assert again.status_code == 200 and again.json() == answer
    other = client.post(url, json={"trial_id": p["trial_id"], "label": "cat"})
    assert other.status_code == 409 and "already labelled 'bird'" in detail(other)
    m = wait_folded(client, model_name)
    assert m["version"] == 1
    assert m["counters"] | {} == {
        "predictions": 1,
        "labelled": 1,
        "learned": 0,
        "mistakes": 1,
        "updates": 1,
        "expired": 0,
        "late_labels": 0,
        "quarantined": 0,
        "refused": 0,
    }


def test_mistake_is_judged_against_the_served_prediction(
    client: httpx.Client, model_name: str
) -> None:
    create(client, model_name, FUSION)
    inst = {"experts": {"cnn": "dog"}}
    a = client.post(f"/v1/models/{model_name}/predict", json={"instance": inst}).json()
    b = client.post(f"/v1/models/{model_name}/predict", json={"instance": inst}).json()
    assert a["label"] == b["label"] == "dog"
    # the first label teaches the model that cnn's "dog" means "cat" ...
    client.post(f"/v1/models/{model_name}/label", json={"trial_id": a["trial_id"], "label": "cat"})
    # ... but the second trial was served "dog" before that, and is judged on it
    r = client.post(
        f"/v1/models/{model_name}/label", json={"trial_id": b["trial_id"], "label": "dog"}
    )
    assert r.json()["predicted"] == "dog" and r.json()["mistake"] is False


def test_unknown_expired_and_untracked_trials(client: httpx.Client, model_name: str) -> None:
    create(client, model_name, FUSION, label_ttl=0.2)
    url = f"/v1/models/{model_name}"
    r = client.post(f"{url}/label", json={"trial_id": "nope", "label": "cat"})
    assert r.status_code == 404 and "nope" in detail(r)
    inst = {"experts": {"knn": "cat"}}
    untracked = client.post(f"{url}/predict", json={"instance": inst, "track": False}).json()
    assert untracked["trial_id"] is None and untracked["label"] == "cat"
    p = client.post(f"{url}/predict", json={"instance": inst}).json()
    time.sleep(0.3)
    r = client.post(f"{url}/label", json={"trial_id": p["trial_id"], "label": "cat"})
    assert r.status_code == 404 and "deadline" in detail(r)
    m = client.get(url).json()
    assert m["counters"]["late_labels"] == 1 and m["counters"]["predictions"] == 1
    assert m["counters"]["expired"] == 1 and m["version"] == 0


def test_client_trial_ids(client: httpx.Client, model_name: str) -> None:
    create(client, model_name, FUSION)
    url = f"/v1/models/{model_name}/predict"
    body = {"instance": {"experts": {"svm": "bird"}}, "trial_id": "order-17"}
    first = client.post(url, json=body).json()
    assert first["trial_id"] == "order-17"
    assert client.post(url, json=body).json() == first  # a retried predict is harmless
    other = {"instance": {"experts": {"svm": "cat"}}, "trial_id": "order-17"}
    assert client.post(url, json=other).status_code == 409
    bad = client.post(url, json={**body, "trial_id": "has space"})
    assert bad.status_code == 422 and "trial_id" in str(bad.json())
    assert client.get(f"/v1/models/{model_name}").json()["counters"]["predictions"] == 1


@pytest.mark.parametrize(
    ("instance", "words"),
    [
        ({"features": [0.0] * 999}, "1000"),
        ({"features": {"1000": 1.0}}, "1000"),
        ({"features": {"x": 1.0}}, "x"),
        ({"features": [0.0] * 999 + ["a"]}, "number"),
        ({"experts": {"a": 1}}, "experts"),
        ({"colour": "red"}, "colour"),
        ({"features": {"5": 2.0}}, "[0, 1]"),
    ],
)
def test_bad_instance_is_422(
    client: httpx.Client, model_name: str, instance: dict[str, Any], words: str
) -> None:
    create(client, model_name, SPARSE)
    r = client.post(f"/v1/models/{model_name}/learn", json={"instance": instance, "label": 1})
    assert r.status_code == 422, r.text
    assert "instance" in str(r.json()["detail"][0]["loc"]) and words in r.text
    assert client.get(f"/v1/models/{model_name}").json()["version"] == 0


def test_non_finite_numbers_are_422(client: httpx.Client, model_name: str) -> None:
    create(client, model_name, SPARSE)
    # an integer beyond a double's range is read as orjson would read it: infinite
    for token in ("NaN", "Infinity", "-Infinity", "1e999", "9" * 400, "-" + "9" * 400):
        body = '{"instance": {"features": {"5": ' + token + '}}, "label": 1}'
        r = client.post(
            f"/v1/models/{model_name}/learn",
            content=body,
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 422, (token, r.text)
        assert "finite" in r.text
    r = client.post(f"/v1/models/{model_name}/learn", json={"instance": {}, "label": 7})
    assert r.status_code == 422 and "label" in str(r.json()["detail"][0]["loc"])
    assert "unknown label 7" in r.text


def test_body_limit_is_413(client: httpx.Client, model_name: str) -> None:
    create(client, model_name, SPARSE)
    big = {"instance": {"features": {str(i): 1.0 for i in range(400_000)}}, "label": 1}
    r = client.post(f"/v1/models/{model_name}/learn", json=big)
    assert r.status_code == 413 and "at most" in detail(r)

    def chunks() -> Any:
        yield b'{"instance": {"features": [' + b"0," * 3_000_000
        yield b'0]}, "label": 1}'

    r = client.post(
        f"/v1/models/{model_name}/learn",
        content=chunks(),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 413


def test_learn_agrees_with_the_learner_itself(client: httpx.Client, model_name: str) -> None:
    """Trial by trial, the service answers what the same learner in-process does."""
    problem = MajorityProblem(n=20, r=10, k=5, noise=0.05)
    n = problem.n_experts
    config = {
        "labels": list(range(5)),
        "input": {"experts": {"expert_names": [f"e{i}" for i in range(n)]}},
        "learner": {"kind": "committee", "alpha": 1.2},
    }
    create(client, model_name, config)
    xs, ys, _ = problem.sample(150, np.random.default_rng(3))
    _, _, local = build_model({**config, "label_ttl": 1.0})
    url = f"/v1/models/{model_name}"
    mistakes = 0
    for t, (x, y) in enumerate(zip(xs, ys, strict=True)):
        dense = x.dense(n, 5)
        inst = {"experts": {f"e{e}": [float(v) for v in dense[e]] for e in range(n)}}
        expected = local.learn(x, int(y))
        if t % 2:
            got = client.post(f"{url}/learn", json={"instance": inst, "label": int(y)}).json()
        else:
            p = client.post(f"{url}/predict", json={"instance": inst}).json()
            got = client.post(f"{url}/label", json={"trial_id": p["trial_id"], "label": int(y)})
            got = got.json()
        assert (got["mistake"], got["updated"]) == tuple(expected), t
        mistakes += expected.mistake
    m = wait_folded(client, model_name)
    assert m["counters"]["mistakes"] == mistakes == local.mistakes_
    state = client.get(f"{url}/state").json()
    assert state["model_version"] == 150
    assert state["state"] == local.export_state()


def test_batches_keep_order_and_report_per_item(client: httpx.Client, model_name: str) -> None:
    create(client, model_name, FUSION)
    url = f"/v1/models/{model_name}"
    rng = np.random.default_rng(0)
    items = [{"instance": {"experts": votes(rng)}} for _ in range(5)]
    items[2] = {"instance": {"experts": {"ghost": "cat"}}}
    out = client.post(f"{url}/predict/batch", json={"items": items}).json()["items"]
    assert [o["error"] is None for o in out] == [True, True, False, True, True]
    assert out[2]["error"]["status"] == 422 and out[2]["error"]["field"] == "items.2.instance"
    ids = [o["result"]["trial_id"] for o in out if o["result"]]
    labels = [{"trial_id": t, "label": "dog"} for t in ids]
    labels.insert(1, {"trial_id": "missing", "label": "dog"})
    labels.append({"trial_id": ids[0], "label": "cat"})
    got = client.post(f"{url}/label/batch", json={"items": labels}).json()["items"]
    assert [o["error"]["status"] if o["error"] else 200 for o in got] == [
        200,
        404,
        200,
        200,
        200,
        409,
    ]
    assert [o["result"]["trial_id"] for o in got if o["result"]] == ids
    learn = [{"instance": {"experts": votes(rng)}, "label": "bird"} for _ in range(4)]
    got = client.post(f"{url}/learn/batch", json={"items": learn}).json()["items"]
    assert all(o["result"]["label"] == "bird" for o in got)
    assert wait_folded(client, model_name)["version"] == 8
    r = client.post(f"{url}/learn/batch", json={"items": []})
    assert r.status_code == 422


def test_learn_batch_equals_single_trials(client: httpx.Client, model_name: str) -> None:
    create(client, model_name, SPARSE)
    create(client, model_name + "b", SPARSE)
    rng = np.random.default_rng(1)
    items = []
    for _ in range(60):
        idx = rng.choice(1000, 8, replace=False)
        items.append(
            {
                "instance": {"features": {str(i): 1.0 for i in idx}},
                "label": 1 if idx.min() < 100 else -1,
            }
        )
    batch = client.post(f"/v1/models/{model_name}/learn/batch", json={"items": items}).json()
    single = [client.post(f"/v1/models/{model_name}b/learn", json=item).json() for item in items]
    assert [o["result"] for o in batch["items"]] == single
    a = client.get(f"/v1/models/{model_name}/state").json()["state"]
    b = client.get(f"/v1/models/{model_name}b/state").json()["state"]
    assert a == b


def test_state_export_and_import(client: httpx.Client, model_name: str) -> None:
    src, dst = model_name, model_name + "-copy"
    create(client, src, FUSION)
    create(client, dst, FUSION)
    rng = np.random.default_rng(2)
    for _ in range(30):
        item = {"instance": {"experts": votes(rng)}, "label": "cat"}
        client.post(f"/v1/models/{src}/learn", json=item)
    exported = client.get(f"/v1/models/{src}/state").json()
    r = client.put(f"/v1/models/{dst}/state", json={"state": exported["state"]})
    assert r.status_code == 200 and r.json()["model_version"] == 1
    probe = {"instance": {"experts": votes(rng)}, "track": False}
    a = client.post(f"/v1/models/{src}/predict", json=probe).json()
    b = client.post(f"/v1/models/{dst}/predict", json=probe).json()
    assert a["scores"] == b["scores"]
    assert client.get(f"/v1/models/{dst}/state").json()["state"] == exported["state"]
    # it keeps learning from there
    item = {"instance": {"experts": votes(rng)}, "label": "dog"}
    assert client.post(f"/v1/models/{dst}/learn", json=item).status_code == 200
    assert client.get(f"/v1/models/{dst}").json()["version"] == 2
    bad = dict(exported["state"], kind="perceptron")
    r = client.put(f"/v1/models/{dst}/state", json={"state": bad})
    assert r.status_code == 422 and "state" in str(r.json()["detail"][0]["loc"])
    assert client.get(f"/v1/models/{dst}").json()["version"] == 2


def _post(client: httpx.Client, url: str, doc: Any) -> httpx.Response:
    """POST ``doc`` as JSON, NaN spelled as Python's json module spells it."""
    return client.post(url, content=json.dumps(doc), headers={"content-type": "application/json"})


def _one_by_one(client: httpx.Client, url: str, items: list[Any]) -> list[dict[str, Any]]:
    """Each item through POST .../learn, as a batch item would report it."""
    out = []
    for i, item in enumerate(items):
        r = _post(client, f"{url}/learn", item)
        if r.status_code == 200:
            out.append({"result": r.json(), "error": None})
        else:
            assert r.status_code == 422, r.text
            (err,) = r.json()["detail"]
            field = ".".join(["items", str(i), *err["loc"][1:]])
            out.append(
                {"result": None, "error": {"status": 422, "message": err["msg"], "field": field}}
            )
    return out


@pytest.mark.parametrize("constant", [False, True])
@pytest.mark.parametrize("finite", [True, False])
def test_learn_batch_with_odd_items_equals_single_trials(
    client: httpx.Client, model_name: str, constant: bool, finite: bool
) -> None:
    """Duplicate, out-of-range and odd keys, zero values, bad labels: each item of a batch
    is answered and learned as it would be alone, and the learner ends the same."""
    body = {**SPARSE, "input": {"attributes": {"n_features": 1000, "constant_attribute": constant}}}
    create(client, model_name, body)
    create(client, model_name + "b", body)
    rng = np.random.default_rng(2)
    odd: list[Any] = [
        {"features": {"1000": 1.0}},
        {"features": {"007": 1.0, "7": 0.5}},
        {"features": {"1,2": 1.0}},
        {"features": {"x": 1.0}},
        {"features": {"3": 2.0}},  # beyond Balanced Winnow's value range
        {"features": {"3": 0, "4": 1}},
        {"features": {"3": True}},
        {"features": {}},
        {"features": None},
        {"features": [0.5] * 1000},
        {"experts": {"e": 1}},
        {"features": {"5": float("nan") if not finite else 0.25}},
        {"features": 2**65},  # orjson reads it as a float
        {"features": {"3": 2**65}},
        {"features": {"3": 1.0}, "experts": None},
    ]
    items: list[Any] = []
    for t in range(100):
        idx = rng.choice(1000, 8, replace=False)
        x: Any = {"features": {str(i): float(rng.choice([0.0, 0.5, 1.0])) for i in idx}}
        if t % 6 == 3:
            x = odd[(t // 6) % len(odd)]
        label: Any = 1 if idx.min() < 100 else -1
        items.append({"instance": x, "label": "cat" if t % 17 == 5 else label})
    url = f"/v1/models/{model_name}"
    r = _post(client, f"{url}/learn/batch", {"items": items})
    assert r.status_code == 200, r.text
    batch = r.json()["items"]
    assert batch == _one_by_one(client, url + "b", items)
    assert sum(o["error"] is None for o in batch) > 50
    a = client.get(f"{url}/state").json()["state"]
    b = client.get(f"{url}b/state").json()["state"]
    assert a == b


@pytest.mark.parametrize(
    "bad",
    [
        {"instance": {"features": {"1": 1.0}}, "label": True},
        {"instance": {"features": {"1": 1.0}, "other": 1}, "label": 1},
        {"instance": {"features": {"1": 1.0}}, "label": 1, "more": 2},
        {"instance": {"experts": [1]}, "label": 1},
        {"instance": [], "label": 1},
        {"label": 1},
    ],
)
def test_learn_batch_of_malformed_shape_is_fastapis_422(
    client: httpx.Client, model_name: str, bad: dict[str, Any]
) -> None:
    create(client, model_name, SPARSE)
    good = {"instance": {"features": {"1": 1.0}}, "label": 1}
    r = client.post(f"/v1/models/{model_name}/learn/batch", json={"items": [good, bad]})
    assert r.status_code == 422
    locs = [e["loc"][:3] for e in r.json()["detail"]]
    assert locs and all(loc == ["body", "items", 1] for loc in locs)
    assert client.get(f"/v1/models/{model_name}").json()["version"] == 0


def test_large_label_batch(client: httpx.Client, model_name: str) -> None:
    """More labels than a script carries back: the rest are read from the log."""
    create(client, model_name, FUSION)
    url = f"/v1/models/{model_name}"
    rng = np.random.default_rng(7)
    items = [{"instance": {"experts": votes(rng)}} for _ in range(400)]
    made = client.post(f"{url}/predict/batch", json={"items": items}).json()["items"]
    labels = [{"trial_id": m["result"]["trial_id"], "label": "dog"} for m in made]
    got = client.post(f"{url}/label/batch", json={"items": labels}).json()["items"]
    assert all(g["error"] is None for g in got)
    mistakes = sum(g["result"]["mistake"] for g in got)
    assert mistakes == sum(m["result"]["label"] != "dog" for m in made)
    m = wait_folded(client, model_name)
    assert m["version"] == 400 and m["counters"]["mistakes"] == mistakes
    assert m["counters"]["updates"] == sum(g["result"]["updated"] for g in got)
