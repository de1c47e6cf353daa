"""Numbers that stay numbers, over HTTP against the real app and Redis: a parameter or a
value a learner cannot represent is a 422 naming the field and its bound; whatever is
accepted is answered with scores that are numbers, and an update a learner refuses is
counted."""

from __future__ import annotations

import math
from typing import Any

import httpx

from models.core.params import VALUE_LIMIT

EXPERTS = {"experts": {"expert_names": ["cnn", "svm", "knn"]}}
ATTRIBUTES = {"attributes": {"n_features": 3}}


def create(c: httpx.Client, name: str, body: dict[str, Any]) -> httpx.Response:
    return c.post("/v1/models", json={"name": name, **body})


def field(r: httpx.Response) -> str:
    return ".".join(str(p) for p in r.json()["detail"][0]["loc"])


def numbers(scores: dict[str, Any]) -> bool:
    return all(isinstance(v, int | float) and math.isfinite(v) for v in scores.values())


def test_a_committee_alpha_beyond_its_bound_is_a_422_naming_it(
    client: httpx.Client, model_name: str
) -> None:
    body = {"labels": ["cat", "dog"], "input": EXPERTS, "learner": {"kind": "committee"}}
    r = create(client, model_name, {**body, "learner": {"kind": "committee", "alpha": 1e308}})
    assert r.status_code == 422, r.text
    assert field(r).endswith("learner.alpha") and "1e+200" in r.text, r.text
    assert client.get(f"/v1/models/{model_name}").status_code == 404


def test_an_alpha_at_the_bound_answers_numbers(client: httpx.Client, model_name: str) -> None:
    body = {"labels": ["cat", "dog"], "input": EXPERTS, "learner": {"kind": "committee"}}
    r = create(client, model_name, {**body, "learner": {"kind": "committee", "alpha": 1e200}})
    assert r.status_code == 201, r.text
    votes = [
        {"cnn": "cat", "svm": "dog"},
        {"cnn": "dog", "knn": "dog"},
        {"svm": "cat", "knn": "cat"},
    ]
    for t in range(30):
        instance = {"experts": votes[t % len(votes)]}
        p = client.post(f"/v1/models/{model_name}/predict", json={"instance": instance})
        assert p.status_code == 200 and numbers(p.json()["scores"]), p.text
        wrong = "dog" if p.json()["label"] == "cat" else "cat"
        r = client.post(
            f"/v1/models/{model_name}/learn", json={"instance": instance, "label": wrong}
        )
        assert r.status_code == 200 and r.json()["mistake"] and r.json()["updated"], r.text


def test_perceptron_values_beyond_the_limit_are_a_422_naming_the_instance(
    client: httpx.Client, model_name: str
) -> None:
    body = {"labels": [1, -1], "input": ATTRIBUTES, "learner": {"kind": "perceptron"}}
    assert create(client, model_name, body).status_code == 201
    attack = {"features": {"0": 1e308, "1": -1e308}}
    for route, extra in (("predict", {}), ("learn", {"label": -1})):
        r = client.post(f"/v1/models/{model_name}/{route}", json={"instance": attack, **extra})
        assert r.status_code == 422, r.text
        assert "instance" in field(r) and "1e+100" in r.text, r.text
    stats = client.get(f"/v1/models/{model_name}/stats").json()
    assert stats["version"] == 0


def test_perceptron_values_at_the_limit_answer_numbers_and_keep_learning(
    client: httpx.Client, model_name: str
) -> None:
    body = {"labels": [1, -1], "input": ATTRIBUTES, "learner": {"kind": "perceptron", "eta": 1e50}}
    assert create(client, model_name, body).status_code == 201
    edge = [
        {"0": VALUE_LIMIT, "1": -VALUE_LIMIT},
        {"0": VALUE_LIMIT, "1": VALUE_LIMIT, "2": 5e-324},
    ]
    for t in range(40):
        instance = {"features": edge[t % len(edge)]}
        p = client.post(f"/v1/models/{model_name}/predict", json={"instance": instance})
        assert p.status_code == 200 and numbers(p.json()["scores"]), p.text
        wrong = -1 if p.json()["label"] == 1 else 1
        r = client.post(
            f"/v1/models/{model_name}/learn", json={"instance": instance, "label": wrong}
        )
        assert r.status_code == 200 and r.json()["mistake"] and r.json()["updated"], r.text
    stats = client.get(f"/v1/models/{model_name}/stats").json()
    assert stats["refused"] == 0 and stats["version"] == 40


def test_a_refused_update_is_counted_and_the_scores_stay_numbers(
    client: httpx.Client, model_name: str
) -> None:
    """Multi-class Winnow refuses, whole, an update past its ceiling; the service counts it."""
    body = {
        "labels": ["cat", "dog"],
        "input": EXPERTS,
        "learner": {"kind": "multiclass-winnow", "alpha": 1.7e308},
    }
    assert create(client, model_name, body).status_code == 201, body
    instance = {"experts": {"cnn": "cat", "svm": "dog"}}
    p = client.post(f"/v1/models/{model_name}/predict", json={"instance": instance})
    wrong = "dog" if p.json()["label"] == "cat" else "cat"
    r = client.post(f"/v1/models/{model_name}/learn", json={"instance": instance, "label": wrong})
    assert r.status_code == 200 and r.json()["mistake"] and not r.json()["updated"], r.text
    p = client.post(f"/v1/models/{model_name}/predict", json={"instance": instance})
    assert p.status_code == 200 and numbers(p.json()["scores"]), p.text
    stats = client.get(f"/v1/models/{model_name}/stats").json()
    assert stats["refused"] == 1, stats
