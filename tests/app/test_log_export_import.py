"""A model's log out (``GET .../log``, ``committee export``) and a labelled history in
(``POST .../log``, ``committee import``): pages bounded and chained, a round trip that gives
the same learner state, imports idempotent by block and resumable after a kill, and
hostile requests answered with a 4xx naming what is wrong."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from app.core.settings import Settings
from app.service.log_export import Payloads, exactly, payloads_of
from app.service.log_import import BLOCK
from models.inputs.space import InputSpace

ROOT = Path(__file__).resolve().parents[2]
NDJSON = {"content-type": "application/x-ndjson"}
FUSION: dict[str, Any] = {
    "labels": ["cat", "dog", "bird"],
    "input": {
        "attributes": {"feature_names": ["size", "fur"], "constant_attribute": True},
        "experts": {
            "expert_names": ["cnn", "svm", "knn"],
            "threshold_experts": True,
            "split_classes": "all",
            "combinations": {"size": 2},
        },
    },
    "learner": {"kind": "committee", "alpha": 1.5},
}
RANKED: dict[str, Any] = {
    "labels": ["cat", "dog", "bird"],
    "input": {"experts": {"expert_names": ["cnn", "svm"], "normalize": ["raw", "rank"]}},
    "learner": {"kind": "multiclass-winnow", "alpha": 1.3},
}
SPARSE: dict[str, Any] = {
    "labels": [1, -1],
    "input": {"attributes": {"n_features": 50, "constant_attribute": True}},
    "learner": {"kind": "balanced-winnow", "alpha": 1.2},
}
SUMMED: dict[str, Any] = {  # votes normalised to sum to one: their scores are not kept
    "labels": ["cat", "dog"],
    "input": {"experts": {"expert_names": ["cnn", "svm"], "normalize": "sum-to-one"}},
    "learner": {"kind": "committee"},
}


def ndjson(docs: Iterable[Any]) -> bytes:
    return b"".join(orjson.dumps(d) + b"\n" for d in docs)


def make(c: httpx.Client, name: str, spec: dict[str, Any]) -> None:
    r = c.post("/v1/models", json={"name": name, **spec})
    assert r.status_code == 201, r.text


def post_log(
    c: httpx.Client, name: str, body: bytes, import_id: str = "i1", first_line: int = 1
) -> httpx.Response:
    params = {"import_id": import_id, "first_line": first_line}
    return c.post(f"/v1/models/{name}/log", params=params, content=body, headers=NDJSON)


def export(c: httpx.Client, name: str, after: int = 0, limit: int | None = None) -> list[Any]:
    """Every entry after ``after``, page by page, following Committee-Next-From."""
    out: list[Any] = []
    while True:
        params = {"from": after, **({} if limit is None else {"limit": limit})}
        r = c.get(f"/v1/models/{name}/log", params=params)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/x-ndjson"
        out += [orjson.loads(line) for line in r.content.splitlines()]
        after = int(r.headers["committee-next-from"])
        if after >= int(r.headers["committee-log-version"]):
            return out


def version(c: httpx.Client, name: str) -> int:
    return int(c.get(f"/v1/models/{name}").json()["version"])


def fusion_instance(i: int) -> dict[str, Any]:
    """A fusion instance that varies with ``i``: votes as maps, lists and bare labels,
    an abstaining expert now and then, features by name."""
    labels = FUSION["labels"]
    votes: dict[str, Any] = {
        "cnn": {labels[i % 3]: 0.9, labels[(i + 1) % 3]: round(0.1 * (i % 7), 3)},
        "svm": labels[(i * 7) % 3],
    }
    if i % 4:
        votes["knn"] = [0.2, 0.5, 0.3] if i % 2 else [0.0, 0.0, 1.0]
    return {"features": {"size": (i % 10) / 10, "fur": 1.0 if i % 3 else 0.0}, "experts": votes}


def history(c: httpx.Client, name: str, straddle: bool = False) -> None:
    """A model's life: learns, predictions labelled later (after other trials), experts
    and features added, learns with them; with ``straddle``, half the predictions are
    labelled only after the change of the input."""
    labels = FUSION["labels"]
    for i in range(40):
        x = fusion_instance(i)
        r = c.post(f"/v1/models/{name}/learn", json={"instance": x, "label": labels[i % 3]})
        assert r.status_code == 200, r.text
    served = []
    for i in range(40, 50):
        t = f"t{i}"
        r = c.post(
            f"/v1/models/{name}/predict", json={"instance": fusion_instance(i), "trial_id": t}
        )
        assert r.status_code == 200, r.text
        served.append(t)
    before, after = (served[:5], served[5:]) if straddle else (served, [])
    for t in before:  # delayed labels
        r = c.post(f"/v1/models/{name}/label", json={"trial_id": t, "label": "dog"})
        assert r.status_code == 200, r.text
    assert c.post(f"/v1/models/{name}/experts", json={"add": ["vit"]}).status_code == 200
    assert c.post(f"/v1/models/{name}/features", json={"add": ["ears"]}).status_code == 200
    for i in range(50, 70):
        x = fusion_instance(i)
        x["experts"]["vit"] = {"bird": 0.8}
        x["features"]["ears"] = 0.5
        r = c.post(f"/v1/models/{name}/learn", json={"instance": x, "label": labels[i % 3]})
        assert r.status_code == 200, r.text
    if after:  # predicted before the change, labelled after it
        items = [{"trial_id": t, "label": "cat"} for t in after]
        r = c.post(f"/v1/models/{name}/label/batch", json={"items": items})
        assert r.status_code == 200 and all(i["error"] is None for i in r.json()["items"]), r.text


# -- payloads given back -----------------------------------------------------------

SPACES: dict[str, tuple[dict[str, Any], str]] = {
    "derived": (
        {
            "labels": ["a", "b", "c"],
            "attributes": {"n_features": 4, "constant_attribute": True},
            "experts": {
                "expert_names": ["e1", "e2", "e3"],
                "combinations": {"size": 3, "by": ["score", "rank"]},
                "split_classes": ["b"],
                "threshold_experts": True,
            },
        },
        "experts",
    ),
    "raw second": (
        {
            "labels": [1, 2, 3],
            "experts": {"expert_names": ["e1", "e2"], "normalize": ["rank", "raw"]},
        },
        "experts",
    ),
    "named": (
        {"labels": ["x", "y"], "attributes": {"feature_names": ["f", "g", "h"]}},
        "attributes",
    ),
}


def random_payload(rng: np.random.Generator, space: InputSpace) -> dict[str, Any]:
    labels = list(space.labels)
    out: dict[str, Any] = {}
    if space.experts is not None:
        votes: dict[str, Any] = {}
        for e in space.expert_names:
            kind = rng.integers(4)
            if kind == 1:
                votes[e] = {
                    str(y): round(float(rng.random()), 3) for y in labels if rng.random() < 0.7
                }
            elif kind == 2:
                votes[e] = [round(float(v), 3) for v in rng.random(len(labels))]
            elif kind == 3:
                votes[e] = labels[int(rng.integers(len(labels)))]
        out["experts"] = votes
    if space.attributes is not None:
        keys = space.attributes.get("feature_names") or [str(i) for i in range(4)]
        out["features"] = {
            k: float(rng.choice([0.0, 0.25, 1.0])) for k in keys if rng.random() < 0.6
        }
    return out


@pytest.mark.parametrize("which", list(SPACES))
def test_a_payload_given_back_encodes_to_the_same_instance(which: str) -> None:
    config, form = SPACES[which]
    space = InputSpace.from_config(config)
    given = Payloads(space, form)
    assert given.exact
    rng = np.random.default_rng(7)
    payloads = [random_payload(rng, space) for _ in range(300)]
    xs = [space.encode(p, form) for p in payloads]
    back = [given.payload(x) for x in xs]
    assert exactly(back, xs, [space] * len(xs), form) == back
    assert None not in back


def test_a_payload_is_checked_against_the_input_at_its_place() -> None:
    config, form = SPACES["derived"]
    before = InputSpace.from_config(config)
    after = before.changed({"experts": {"add": ["e4"]}, "labels": {"add": ["d"]}})
    rng = np.random.default_rng(3)
    payloads = [random_payload(rng, before) for _ in range(50)]
    xs = [before.encode(p, form) for p in payloads]  # encoded before the change
    back = [payloads_of(after, form).payload(x) for x in xs]  # read by the input after it
    assert exactly(back, xs, [before] * len(xs), form) == back  # learned before: exact
    # labelled after the change: the input then adds e4's subsets and d's threshold
    assert exactly(back, xs, [after] * len(xs), form) == [None] * len(xs)
    assert exactly(back, xs, [None] * len(xs), form) == [None] * len(xs)  # not known


@pytest.mark.parametrize(
    "config",
    [
        {"labels": ["x", "y"], "attributes": {"hashing": {"n_features": 64}}},
        {"labels": ["x", "y"], "experts": {"expert_names": ["e"], "normalize": "argmax"}},
    ],
    ids=["hashed", "argmax"],
)
def test_an_input_that_keeps_no_payloads_gives_none(config: dict[str, Any]) -> None:
    space = InputSpace.from_config(config)
    form = space.forms[-1]
    x = space.encode(
        {"features": {"w": 1.0}} if "attributes" in config else {"experts": {"e": "x"}}, form
    )
    assert not Payloads(space, form).exact and Payloads(space, form).payload(x) is None


# -- export ------------------------------------------------------------------------


def test_the_log_is_exported_in_pages_chained_by_next_from(
    client: httpx.Client, model_name: str
) -> None:
    make(client, model_name, SPARSE)
    items = [
        {"instance": {"features": {str(i % 50): 1.0}}, "label": [1, -1][i % 2]} for i in range(25)
    ]
    assert (
        client.post(f"/v1/models/{model_name}/learn/batch", json={"items": items}).status_code
        == 200
    )
    r = client.get(f"/v1/models/{model_name}/log", params={"limit": 10})
    assert r.status_code == 200
    assert (r.headers["committee-next-from"], r.headers["committee-log-version"]) == ("10", "25")
    first = [orjson.loads(line) for line in r.content.splitlines()]
    assert [e["seq"] for e in first] == list(range(1, 11))
    r = client.get(f"/v1/models/{model_name}/log", params={"from": 20, "limit": 10})
    assert [orjson.loads(x)["seq"] for x in r.content.splitlines()] == [21, 22, 23, 24, 25]
    assert r.headers["committee-next-from"] == "25"
    r = client.get(f"/v1/models/{model_name}/log", params={"from": 25})  # at the head: none
    assert (r.status_code, r.content, r.headers["committee-next-from"]) == (200, b"", "25")
    whole = export(client, model_name, limit=7)
    assert [e["seq"] for e in whole] == list(range(1, 26))
    assert whole[3] == {
        "seq": 4,
        "kind": "learn",
        "instance": {"features": {"3": 1.0}},  # the constant attribute is the model's own
        "label": -1,
    }


def test_the_export_holds_learns_predictions_served_labels_and_changes(
    client: httpx.Client, model_name: str
) -> None:
    make(client, model_name, FUSION)
    history(client, model_name, straddle=True)
    entries = export(client, model_name)
    assert len(entries) == version(client, model_name) == 40 + 5 + 2 + 20 + 5
    kinds = [e["kind"] for e in entries]
    assert kinds == ["learn"] * 40 + ["label"] * 5 + ["change"] * 2 + ["learn"] * 20 + ["label"] * 5
    # features 0.0 and the vote for dog 0.0 are no values: left out, as the model keeps
    # them; knn abstained
    assert entries[0]["instance"] == {"experts": {"cnn": {"cat": 0.9}, "svm": {"cat": 1.0}}}
    assert entries[1]["instance"]["experts"]["knn"] == {"cat": 0.2, "dog": 0.5, "bird": 0.3}
    labelled = entries[40]
    assert labelled["trial_id"] == "t40" and labelled["label"] == "dog"
    assert labelled["served_at"] == 40 and labelled["predicted"] in FUSION["labels"]
    assert labelled["instance"] == {  # fusion_instance(40), as the model keeps it
        "features": {"fur": 1.0},
        "experts": {"cnn": {"dog": 0.9, "bird": 0.5}, "svm": {"dog": 1.0}},
    }
    assert entries[45:47] == [
        {"seq": 46, "kind": "change", "change": {"experts": {"add": ["vit"]}}},
        {"seq": 47, "kind": "change", "change": {"features": {"add": ["ears"]}}},
    ]
    assert entries[47]["instance"]["experts"]["vit"] == {"bird": 0.8}
    assert entries[47]["instance"]["features"]["ears"] == 0.5
    # served before the change and labelled after: its instance is the one encoded then,
    # which the input after the change would not give from a payload: coordinates
    late = entries[-1]
    assert late["trial_id"] == "t49" and late["served_at"] == 40 and late["label"] == "cat"
    assert "instance" not in late and set(late["x"]) == {"experts", "classes", "values"}


def test_an_import_refuses_a_prediction_labelled_across_a_change(
    client: httpx.Client, model_name: str
) -> None:
    make(client, model_name, FUSION)
    history(client, model_name, straddle=True)
    copy = f"{model_name}-copy"
    make(client, copy, FUSION)
    r = post_log(client, copy, ndjson(export(client, model_name)))
    assert r.status_code == 422
    (err,) = r.json()["detail"]
    assert err["loc"] == ["body", "lines", 68, "x"] and "coordinates" in err["msg"]
    assert version(client, copy) == 0


@pytest.mark.parametrize("spec", [FUSION, RANKED, SPARSE], ids=["fusion", "ranked", "sparse"])
def test_an_export_imported_into_a_new_model_gives_the_same_state(
    client: httpx.Client, model_name: str, spec: dict[str, Any]
) -> None:
    copy = f"{model_name}-copy"
    make(client, model_name, spec)
    make(client, copy, spec)
    if spec is FUSION:
        history(client, model_name)
    else:
        labels = spec["labels"]
        for i in range(300):
            x = (
                {"features": {str((i * 7) % 50): 1.0, str(i % 13): 0.5}}
                if spec is SPARSE
                else {
                    "experts": {
                        "cnn": {labels[i % 3]: 0.7, labels[(i + 2) % 3]: 0.2},
                        "svm": labels[(i // 3) % 3],
                    }
                }
            )
            r = client.post(
                f"/v1/models/{model_name}/learn",
                json={"instance": x, "label": labels[i % len(labels)]},
            )
            assert r.status_code == 200, r.text
    body = ndjson(export(client, model_name))
    r = post_log(client, copy, body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["failed"] == 0 and got["applied"] == len(body.splitlines()), got
    a = client.get(f"/v1/models/{model_name}/state").json()
    b = client.get(f"/v1/models/{copy}/state").json()
    assert b["model_version"] == a["model_version"]
    assert b["state"] == a["state"]
    # the copy's log: the same instances and labels (labelled predictions become learns)
    ours = [
        {k: e.get(k) for k in ("seq", "instance", "label", "change")}
        for e in export(client, model_name)
    ]
    theirs = [
        {k: e.get(k) for k in ("seq", "instance", "label", "change")} for e in export(client, copy)
    ]
    assert theirs == ours


def test_an_input_that_keeps_no_payloads_is_exported_as_coordinates(
    client: httpx.Client, model_name: str
) -> None:
    make(client, model_name, SUMMED)
    x = {"experts": {"cnn": {"cat": 3.0, "dog": 1.0}}}
    assert (
        client.post(
            f"/v1/models/{model_name}/learn", json={"instance": x, "label": "cat"}
        ).status_code
        == 200
    )
    (entry,) = export(client, model_name)
    assert "instance" not in entry
    assert entry["x"] == {"experts": [0, 0], "classes": [0, 1], "values": [0.75, 0.25]}
    make(client, f"{model_name}-copy", SUMMED)
    r = post_log(client, f"{model_name}-copy", ndjson([entry]))
    assert r.status_code == 422
    (err,) = r.json()["detail"]
    assert err["loc"] == ["body", "lines", 1, "x"] and "coordinates" in err["msg"]


def test_export_refuses_versions_it_cannot_give(client: httpx.Client, model_name: str) -> None:
    make(client, model_name, SPARSE)
    url = f"/v1/models/{model_name}/log"
    for params, field in (
        ({"from": -1}, "from"),
        ({"from": 10**30}, "from"),
        ({"from": "seven"}, "from"),
        ({"from": 1}, "from"),  # beyond the model's version, 0
        ({"limit": 0}, "limit"),
        ({"limit": 10_001}, "limit"),  # beyond max_log_entries
    ):
        r = client.get(url, params=params)
        assert r.status_code == 422, (params, r.text)
        assert r.json()["detail"][0]["loc"] == ["query", field], r.text
    assert "max_log_entries" in client.get(url, params={"limit": 10_001}).text
    assert client.get(f"/v1/models/{model_name}-none/log").status_code == 404


def test_export_from_before_the_log_a_snapshot_replaced_names_where_it_starts(
    redis_url: str, server_thread: Any
) -> None:
    settings = Settings(
        redis_url=redis_url, key_prefix=f"t-{uuid.uuid4().hex[:12]}", log_retain=0, snapshot_every=1
    )
    with server_thread(settings) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        make(c, "m", SPARSE)
        for i in range(30):
            c.post("/v1/models/m/learn", json={"instance": {"features": {str(i): 1.0}}, "label": 1})
        # snapshots are written in the background, each trimming the log further: read
        # until the place it starts stays where it is for half a second
        first, seen, deadline = -1, 0, time.monotonic() + 30
        while seen < 5 and time.monotonic() < deadline:
            r = c.get("/v1/models/m/log")
            if r.status_code == 422:
                (err,) = r.json()["detail"]
                assert err["loc"] == ["query", "from"] and "GET .../versions" in err["msg"]
                now = int(err["msg"].split("ask from=")[1].split(" ")[0])
                seen, first = (seen + 1, now) if now == first else (0, now)
            time.sleep(0.1)
        assert r.status_code == 422, r.text
        assert 0 < first <= 30
        tail = export(c, "m", after=first)
        assert [e["seq"] for e in tail] == list(range(first + 1, 31))


# -- import ------------------------------------------------------------------------


def sparse_lines(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "instance": {"features": {str(i % 50): 1.0, str((i * 3) % 50): 0.5}},
            "label": [1, -1][i % 2],
        }
        for i in range(start, start + n)
    ]


def test_an_import_appends_each_block_once(client: httpx.Client, model_name: str) -> None:
    make(client, model_name, SPARSE)
    lines = sparse_lines(250)
    parts = [(1, lines[:100]), (101, lines[100:200]), (201, lines[200:])]
    for first, part in parts:
        r = post_log(client, model_name, ndjson(part), "once", first)
        assert r.status_code == 200, r.text
        assert (r.json()["applied"], r.json()["already"]) == (len(part), 0)
        assert r.json()["next_line"] == first + len(part)
    r = post_log(client, model_name, ndjson(lines[100:200]), "once", 101)  # a retry
    assert (r.json()["applied"], r.json()["already"]) == (0, 100)
    r = post_log(client, model_name, ndjson(lines), "once")  # the whole import again
    assert (r.json()["applied"], r.json()["already"], r.json()["failed"]) == (0, 250, 0)
    assert version(client, model_name) == 250
    r = client.get(f"/v1/models/{model_name}/log/imports/once")
    assert r.json() == {"import_id": "once", "next_line": 301, "block": BLOCK}
    assert client.get(f"/v1/models/{model_name}/log/imports/other").json()["next_line"] == 1
    r = post_log(client, model_name, ndjson(lines[:10]), "another")  # another import: again
    assert r.json()["applied"] == 10 and version(client, model_name) == 260


def test_an_import_into_a_model_made_again_under_its_name_starts_afresh(
    client: httpx.Client, model_name: str
) -> None:
    make(client, model_name, SPARSE)
    body = b"\n" * 100 + ndjson(sparse_lines(50))  # a first block of blank lines
    assert post_log(client, model_name, body, "again").json()["applied"] == 50
    assert client.get(f"/v1/models/{model_name}/log/imports/again").json()["next_line"] == 201
    assert client.delete(f"/v1/models/{model_name}").status_code == 204
    make(client, model_name, SPARSE)
    # the records of the model deleted are not this one's: nothing is done here yet
    assert client.get(f"/v1/models/{model_name}/log/imports/again").json()["next_line"] == 1
    got = post_log(client, model_name, body, "again").json()
    assert (got["applied"], got["failed"]) == (0, 50)
    assert {e["status"] for e in got["errors"]} == {409}
    assert "deleted since: import under another id" in got["errors"][0]["message"]
    assert post_log(client, model_name, body, "afresh").json()["applied"] == 50
    assert version(client, model_name) == 50


def test_a_block_sent_with_other_lines_is_refused_line_by_line(
    client: httpx.Client, model_name: str
) -> None:
    make(client, model_name, SPARSE)
    assert post_log(client, model_name, ndjson(sparse_lines(100)), "same").json()["applied"] == 100
    r = post_log(client, model_name, ndjson(sparse_lines(100, start=7)), "same")
    assert r.status_code == 200
    got = r.json()
    assert (got["applied"], got["already"], got["failed"]) == (0, 0, 100)
    assert {e["status"] for e in got["errors"]} == {409}
    assert "other lines" in got["errors"][0]["message"]
    assert version(client, model_name) == 100


def test_lines_the_model_refuses_are_named_and_the_others_applied(
    client: httpx.Client, model_name: str
) -> None:
    make(client, model_name, SPARSE)
    lines: list[Any] = sparse_lines(6)
    lines[2]["label"] = "maybe"
    lines[4]["instance"] = {"features": {"99": 1.0}}
    body = ndjson(lines[:3]) + b"\n" + ndjson(lines[3:])  # a blank line is line 4
    r = post_log(client, model_name, body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert (got["lines"], got["applied"], got["failed"], got["next_line"]) == (7, 4, 2, 8)
    assert [(e["line"], e["status"], e["field"]) for e in got["errors"]] == [
        (3, 422, "lines.3.label"),
        (6, 422, "lines.6.instance"),
    ]
    assert version(client, model_name) == 4


@pytest.mark.parametrize(
    ("body", "loc", "says"),
    [
        (
            b'{"instance": {}, "label": 1}\n' * 6 + b'{"instance": \n',
            ["body", "lines", 7],
            "line 7 is not JSON",
        ),
        (b'{"instance": {}, "label": 1}\n[1, 2]\n', ["body", "lines", 2], "line 2"),
        (b'{"instance": {}}\n', ["body", "lines", 1, "label"], "Field required"),
        (
            b'{"instance": {}, "label": 1, "colour": "red"}\n',
            ["body", "lines", 1, "colour"],
            "Extra",
        ),
        (
            b'{"instance": {}, "label": 1, "trial_id": "a b"}\n',
            ["body", "lines", 1, "trial_id"],
            "pattern",
        ),
        (b'{"seq": 3, "kind": "reset"}\n', ["body", "lines", 1, "kind"], "cannot be replayed"),
        (b'{"instance": {}, "label": 1, "kind": {}}\n', ["body", "lines", 1, "kind"], "line 1"),
        (b'{"kind": "change", "change": {}}\n', ["body", "lines", 1, "change"], "line 1"),
        (
            b'{"instance": {}, "label": 1}\n' + b"x" * (64 * 1024 + 1) + b"\n",
            ["body", "lines", 2],
            "max_import_line_bytes",
        ),
        (b"\n" * 10_001, ["body"], "max_import_lines"),
        (b"", ["body"], "no lines"),
    ],
)
def test_a_malformed_body_is_a_422_naming_the_line_and_nothing_is_appended(
    client: httpx.Client, model_name: str, body: bytes, loc: list[Any], says: str
) -> None:
    make(client, model_name, SPARSE)
    r = post_log(client, model_name, body)
    assert r.status_code == 422, r.text
    err = r.json()["detail"][0]
    assert err["loc"][: len(loc)] == loc and says in err["msg"], err
    assert version(client, model_name) == 0


def test_a_request_that_does_not_fit_is_refused(client: httpx.Client, model_name: str) -> None:
    make(client, model_name, SPARSE)
    body = ndjson(sparse_lines(3))
    url = f"/v1/models/{model_name}/log"
    r = client.post(
        url, params={"import_id": "x"}, content=body, headers={"content-type": "application/json"}
    )
    assert r.status_code == 415 and "application/x-ndjson" in r.text
    r = client.post(
        url, params={"import_id": "x"}, content=body, headers={"content-type": "text/plain"}
    )
    assert r.status_code == 415  # the guard's
    r = client.post(url, content=body, headers=NDJSON)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "import_id"]
    r = post_log(client, model_name, body, "bad id!")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "import_id"]
    r = post_log(client, model_name, body, "x", first_line=50)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "first_line"]
    assert "send from line 1" in r.text
    for first in (0, -3, 2**62 + 1):
        assert post_log(client, model_name, body, "x", first_line=first).status_code == 422
    assert post_log(client, f"{model_name}-none", body).status_code == 404
    assert version(client, model_name) == 0


def test_change_lines_need_an_admin_key(api_settings: Settings, server_thread: Any) -> None:
    settings = api_settings.model_copy(update={"key_prefix": f"t-{uuid.uuid4().hex[:12]}"})
    with server_thread(settings) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        admin = c.post("/v1/keys", json={"scope": "admin"}).json()["key"]
        c.headers["authorization"] = f"Bearer {admin}"
        make(c, "m", FUSION)
        keys = {s: c.post("/v1/keys", json={"scope": s}).json()["key"] for s in ("read", "write")}
        change = {"kind": "change", "change": {"experts": {"add": ["vit"]}}}
        trial = {"instance": fusion_instance(1), "label": "cat"}
        body = ndjson([trial, change, trial])
        as_writer = {"authorization": f"Bearer {keys['write']}", **NDJSON}
        r = c.post("/v1/models/m/log", params={"import_id": "w"}, content=body, headers=as_writer)
        assert r.status_code == 200, r.text
        got = r.json()
        assert (got["applied"], got["failed"]) == (2, 1)
        assert got["errors"][0]["line"] == 2 and got["errors"][0]["status"] == 403
        as_reader = {"authorization": f"Bearer {keys['read']}", **NDJSON}
        r = c.post("/v1/models/m/log", params={"import_id": "r"}, content=body, headers=as_reader)
        assert r.status_code == 403
        assert (
            c.get(
                "/v1/models/m/log", headers={"authorization": f"Bearer {keys['read']}"}
            ).status_code
            == 200
        )
        r = c.post("/v1/models/m/log", params={"import_id": "a"}, content=body, headers=NDJSON)
        assert (r.json()["applied"], r.json()["failed"]) == (3, 0), r.text
        r = c.post("/v1/models/m/log", params={"import_id": "a"}, content=body, headers=NDJSON)
        assert (r.json()["applied"], r.json()["already"]) == (0, 3), r.text
        assert c.get("/v1/models/m").json()["input"]["experts"]["expert_names"][-1] == "vit"
        assert c.get("/v1/models/m").json()["version"] == 5


def test_a_block_split_by_changes_is_appended_once(client: httpx.Client, model_name: str) -> None:
    make(client, model_name, FUSION)
    lines: list[Any] = [{"instance": fusion_instance(i), "label": "dog"} for i in range(130)]
    lines[30] = {"kind": "change", "change": {"experts": {"add": ["vit"]}}}
    lines[99] = {"kind": "change", "change": {"experts": {"add": ["mlp"]}}}  # ends block 0
    lines[120] = {"kind": "change", "change": {"features": {"add": ["ears"]}}}
    body = ndjson(lines)
    first = post_log(client, model_name, body).json()
    assert (first["applied"], first["failed"]) == (130, 0), first
    again = post_log(client, model_name, body).json()
    assert (again["applied"], again["already"]) == (0, 130), again
    assert post_log(client, model_name, ndjson(lines[100:]), first_line=101).json()["already"] == 30
    assert version(client, model_name) == 130
    assert client.get(f"/v1/models/{model_name}/log/imports/i1").json()["next_line"] == 201


# -- committee import and export ---------------------------------------------------


def cli(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli.main", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def progress_lines(p: subprocess.Popen[str]) -> Iterator[int]:
    """The line each progress report of ``committee import`` names, as they come."""
    assert p.stderr is not None
    for text in p.stderr:
        if text.startswith("committee import: line "):
            yield int(text.split("line ")[1].split(" ")[0].replace(",", ""))


def settled_version(c: httpx.Client, name: str) -> int:
    """The model's version once a request in flight (of a killed client) is done."""
    seen = -1
    while (now := version(c, name)) != seen:
        seen = now
        time.sleep(0.3)
    return seen


def test_a_killed_import_resumes_where_it_stopped_and_doubles_nothing(
    client: httpx.Client, model_name: str, tmp_path: Path
) -> None:
    total = 20_000
    path = tmp_path / "history.jsonl"
    path.write_bytes(ndjson(sparse_lines(total)))
    url = str(client.base_url)
    make(client, model_name, SPARSE)
    p = cli("import", "--model", model_name, str(path), "--url", url, "--progress-every", "0",
            "--lines-per-request", "100")  # fmt: skip
    try:
        for line in progress_lines(p):
            if line >= 3_000:
                p.send_signal(signal.SIGKILL)
                break
    finally:
        p.kill()
        p.wait(30)
    assert p.returncode == -signal.SIGKILL
    stopped = settled_version(client, model_name)
    assert 3_000 <= stopped < total  # it was cut short
    done = cli("import", "--model", model_name, str(path), "--url", url)
    _, err = done.communicate(timeout=300)
    assert done.returncode == 0, err
    assert f"resuming at line {stopped + 1:,}" in err
    got = client.get(f"/v1/models/{model_name}").json()
    assert got["version"] == got["counters"]["learned"] == total
    # the same state as the same history imported in one go
    whole = f"{model_name}-whole"
    make(client, whole, SPARSE)
    body = path.read_bytes().splitlines(keepends=True)
    half = total // 2  # max_import_lines a request
    for first, part in ((1, body[:half]), (half + 1, body[half:])):
        assert post_log(client, whole, b"".join(part), "w", first).json()["applied"] == half
    assert len(export(client, model_name)) == total
    a = client.get(f"/v1/models/{model_name}/state").json()
    b = client.get(f"/v1/models/{whole}/state").json()
    assert a == b
    # run again: everything is there already
    again = cli("import", "--model", model_name, str(path), "--url", url, "--from-line", "1")
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0 and f"0 applied, {total:,} already there" in err
    assert version(client, model_name) == total


def test_committee_export_writes_what_committee_import_takes(
    client: httpx.Client, model_name: str, tmp_path: Path
) -> None:
    make(client, model_name, FUSION)
    history(client, model_name)
    url = str(client.base_url)
    out = tmp_path / "log.ndjson"
    p = cli("export", "--model", model_name, "--url", url, "--output", str(out))
    assert p.wait(120) == 0
    assert [orjson.loads(x) for x in out.read_bytes().splitlines()] == export(client, model_name)
    p = cli("export", "--model", model_name, "--url", url, "--from-version", "60")
    stdout, _ = p.communicate(timeout=120)
    assert [orjson.loads(x)["seq"] for x in stdout.splitlines()] == list(range(61, 73))
    make(client, f"{model_name}-copy", FUSION)
    p = cli("import", "--model", f"{model_name}-copy", str(out), "--url", url, "--quiet")
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    a = client.get(f"/v1/models/{model_name}/state").json()
    b = client.get(f"/v1/models/{model_name}-copy/state").json()
    assert a == b
    bad = tmp_path / "bad.ndjson"
    bad.write_bytes(out.read_bytes().replace(b'"label":"cat"', b'"label":"cow"', 1))
    make(client, f"{model_name}-bad", FUSION)
    p = cli("import", "--model", f"{model_name}-bad", str(bad), "--url", url, "--quiet")
    _, err = p.communicate(timeout=120)
    assert p.returncode == 1 and "line 1: 422 (lines.1.label): unknown label 'cow'" in err
