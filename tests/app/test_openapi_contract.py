"""The OpenAPI document is the contract: schemathesis calls every operation of the served
document with requests it generates from it and runs every check it has.

Requests that fit the schema must be accepted, those that do not refused; every answer's
status, content type, body and headers must be documented; no answer may be a server
error; an undocumented method must be a 405 whose ``Allow`` names the path's methods.
The example model of the document (:data:`app.http.schemas.EXAMPLE_MODEL`) exists while the
operations run, so the examples and generated requests naming it reach a real model.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from app.core.settings import Settings
from app.http.schemas import EXAMPLE_MODEL

# What a request that fits the schema may still be answered, beyond 2xx, by operation.
# Each 404 and 409 is a fact about the data (no such model or trial; a name, trial or
# Idempotency-Key in use); each 422 is a rule JSON Schema cannot state, named below.
ACCEPTED = {
    "GET /v1/models/{name}": [404],
    "DELETE /v1/models/{name}": [404, 409],
    "GET /v1/models/{name}/state": [404],
    "GET /v1/models/{name}/stats": [404],
    # 422: a Last-Event-ID (from) beyond the model's log, an every below its least
    "GET /v1/models/{name}/events": [404, 422],
    # 422: whether the learner takes what the input gives (attributes or experts) and,
    # when wrapped, is of a kind its wrapper takes; labels 1 and "1" that collide as JSON
    # keys; split_classes naming labels not among the labels; a learner over the memory
    # budget or nesting depth; a spec's own labels or sizes that the model's contradict;
    # an integer parameter written 2.0 (learners take integers as written); a real one
    # given as an integer beyond 64 bits (the store keeps 64). 429: a quota of models. A
    # fork: 404 for a source that does not exist, 422 for a version it cannot be rebuilt at.
    "POST /v1/models": [404, 409, 422, 429],
    "GET /v1/models/{name}/versions": [404],
    # 422: a version the model cannot be rebuilt at (beyond its log, say)
    "POST /v1/models/{name}/rollback": [404, 409, 422],
    # 422: a state is valid only for the model's own learner spec.
    "PUT /v1/models/{name}/state": [404, 409, 422],
    # 422: an instance must fit the model's input (feature indices or names, expert names
    # and votes for its labels); a label must be one of the model's. 429: pending trials.
    "POST /v1/models/{name}/predict": [404, 409, 422, 429],
    "POST /v1/models/{name}/label": [404, 409, 422],
    "POST /v1/models/{name}/learn": [404, 409, 422],
    # 422: items whose track values differ (all true or all false, or the batch's own)
    "POST /v1/models/{name}/predict/batch": [404, 422],
    "POST /v1/models/{name}/label/batch": [404, 422],
    "POST /v1/models/{name}/learn/batch": [404, 409, 422],
    "DELETE /v1/keys/{key_id}": [404],
    # 422: a name or label to add must be new (retired experts' names included), one to
    # retire must be a voting expert; the model must have experts, named features or
    # several labels to take them; the learner must be able to grow, within the limits.
    "POST /v1/models/{name}/experts": [404, 409, 422],
    "POST /v1/models/{name}/features": [404, 409, 422],
    "POST /v1/models/{name}/labels": [404, 409, 422],
    # 422: a learner the input cannot feed (as for a create), a version the model cannot
    # be replayed from, a replay beyond the budget. 429: the worker's backtests at once.
    "POST /v1/models/{name}/backtest": [404, 409, 422, 429],
    "GET /v1/models/{name}/backtest": [404],
    # 422: a learner the input cannot feed (as for a create), a name taken, beyond
    # max_challengers or the learner budget. 404: a challenger the model does not have.
    "POST /v1/models/{name}/challengers": [404, 409, 422],
    "GET /v1/models/{name}/challengers": [404],
    "POST /v1/models/{name}/challengers/{challenger}/promote": [404, 409],
    "DELETE /v1/models/{name}/challengers/{challenger}": [404, 409],
    # 422: a webhook_url whose host is not among the operator's alert_allowed_hosts
    "GET /v1/models/{name}/alerts": [404],
    "PUT /v1/models/{name}/alerts": [404, 422],
    "GET /v1/jobs/{job_id}": [404],
    "DELETE /v1/jobs/{job_id}": [404],
    # 422: a version beyond the model's, or before the first entry its log holds
    "GET /v1/models/{name}/log": [404, 422],
    # 422: first_line must start a block of 100 lines (1, 101, ...). A line the model
    # refuses is an error in the 200 body.
    "POST /v1/models/{name}/log": [404, 422],
    "GET /v1/models/{name}/log/imports/{import_id}": [404],
}
MAX_EXAMPLES = 20  # per operation and phase
# The coverage phase derives a case from each keyword of each subschema. A create's learner
# is a union of every kind, nested once more in every wrapper, which gives some 7,400
# cases, mostly the same wrong type at another depth: three quarters of the whole test's
# time. That operation has no coverage phase; its fuzzing phase, which mixes valid and
# invalid bodies as every operation's does, draws more examples instead.
CREATE = "POST /v1/models"
CREATE_EXAMPLES = 300


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx: Any, value: Any) -> bytes:
    """A body of POST .../log: the document the schema describes, as one line."""
    return json.dumps(value).encode() + b"\n"


def _config() -> schemathesis.Config:
    operations = [
        {
            "include-name": key,
            "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", *codes]}},
        }
        | (
            {
                "phases": {"coverage": {"enabled": False}},
                "generation": {"max-examples": CREATE_EXAMPLES},
            }
            if key == CREATE
            else {}
        )
        for key, codes in ACCEPTED.items()
    ]
    return schemathesis.Config.from_dict(
        {
            "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True},
            # every check; a slow answer is one beyond 20 s on this shared machine
            "checks": {"enabled": True, "max_response_time": 20.0},
            "operations": operations,
        }
    )


@pytest.fixture(scope="session")
def contract_url(api_settings: Settings, server_thread: Any) -> Iterator[str]:
    """A server of its own: generated requests touch only its models (the example model
    is the README's "pets", which other tests create with another config), and the keys
    they make turn auth on for it alone."""
    # an event stream ends after a moment, so that each call of it is answered
    update = {"key_prefix": f"t-{uuid.uuid4().hex[:12]}", "events_max_seconds": 0.2}
    settings = api_settings.model_copy(update=update)
    with server_thread(settings) as server:
        yield server.url


@pytest.fixture(scope="session")
def admin(contract_url: str) -> dict[str, str]:
    """The headers of an admin key: the contract runs with auth (and rate limits) on."""
    r = httpx.post(f"{contract_url}/v1/keys", json={"scope": "admin", "name": "contract"})
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['key']}"}


@pytest.fixture(scope="session")
def contract(contract_url: str) -> schemathesis.BaseSchema:
    """The document the contract's server serves, with the test's settings."""
    return schemathesis.openapi.from_url(f"{contract_url}/openapi.json", config=_config())


def _create_example(api_url: str, admin: dict[str, str]) -> None:
    # the first model a server builds may compile its kernels: allow minutes
    with httpx.Client(base_url=api_url, timeout=300, headers=admin) as c:
        r = c.post("/v1/models", json=EXAMPLE_MODEL)
        assert r.status_code in (201, 409), r.text


@pytest.fixture
def example_model(request: pytest.FixtureRequest, contract_url: str, admin: dict[str, str]) -> str:
    """The base URL, with the document's example model in place."""
    # schemathesis (4.32) names each operation's subtest through Node._nodeid, which
    # pytest 9 no longer has: give it the node id it expects
    request.node._nodeid = request.node.nodeid
    _create_example(contract_url, admin)
    return contract_url


schema = schemathesis.pytest.from_fixture("contract")


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_operation_keeps_the_contract(
    case: schemathesis.Case, example_model: str, admin: dict[str, str]
) -> None:
    case.call_and_validate(headers=admin)
    if case.method == "DELETE":  # the example model may be gone: make it again
        _create_example(example_model, admin)
