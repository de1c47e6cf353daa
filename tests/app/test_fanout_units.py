"""The fan-out's pieces on their own: host globs, the circuit breaker, answers as votes."""

from __future__ import annotations

import pytest

from app.service.fanout import (
    CLOSED,
    HALF_OPEN,
    OPEN,
    Asked,
    Breaker,
    Failed,
    _pointer,
    _rows,
    allowed,
    vote_of,
)
from models.inputs.space import InputSpace


@pytest.mark.parametrize(
    ("url", "globs", "ok"),
    [
        ("http://127.0.0.1:8080/x", ["127.0.0.1:*"], True),
        ("http://127.0.0.1/x", ["127.0.0.1:80"], True),
        ("https://127.0.0.1/x", ["127.0.0.1:80"], False),
        ("http://10.0.0.1:8080", ["127.0.0.1:*"], False),
        ("http://m.ml.svc.cluster.local:9000", ["*.svc.cluster.local"], True),
        ("http://svc.cluster.local.evil.com", ["*.svc.cluster.local"], False),
        ("http://evil.com#.svc.cluster.local", ["*.svc.cluster.local"], False),
        ("http://[::1]:8080/x", ["[::1]:*"], True),
        ("http://[::1]:8080/x", ["[::1]"], True),
        ("http://[::2]:8080/x", ["[::1]:*"], False),
        ("http://LOCALHOST:1", ["localhost:*"], True),
        ("http://127.0.0.1:8080", [], False),
        ("http://:8080", ["*"], False),
    ],
)
def test_hosts_are_matched_against_the_globs(url: str, globs: list[str], ok: bool) -> None:
    assert allowed(url, globs) is ok


def test_the_breaker_opens_after_failures_in_a_row_and_a_probe_closes_it() -> None:
    b = Breaker("t", failures=3, cooldown=1.0)
    for t in (0.0, 0.1):
        assert b.admit(t)
        b.record(False, t)
    b.record(True, 0.2)  # not in a row
    for t in (0.3, 0.4, 0.5):
        assert b.admit(t)
        b.record(False, t)
    assert b.state == OPEN and not b.admit(1.4)
    assert b.admit(1.6) and b.state == HALF_OPEN
    assert not b.admit(1.6)  # one probe at a time
    b.record(False, 1.7)  # the probe failed: open again, for another cool-down
    assert b.state == OPEN and not b.admit(2.6)
    assert b.admit(2.8)
    b.record(True, 2.9)
    assert b.state == CLOSED and b.admit(3.0)


SPACE = InputSpace(["a", "b", 3], experts={"expert_names": ["e"]})


def test_answers_become_votes_in_the_models_label_order() -> None:
    plain = Asked(None, None)
    assert vote_of([0.1, 0.2, 0.7], plain, SPACE) == {"a": 0.1, "b": 0.2, "3": 0.7}
    assert vote_of({"b": 1, "zz": 5}, plain, SPACE) == {"a": 0.0, "b": 1.0, "3": 0.0}
    # a classifier whose classes are (3, none of ours, a)
    mapped = Asked(None, (2, None, 0))
    assert vote_of([0.5, 0.3, 0.2], mapped, SPACE) == {"a": 0.2, "b": 0.0, "3": 0.5}
    for bad in (
        [0.1, 0.2],
        [0.1, float("nan"), 0.2],
        [-1, 0, 0],
        [True, 0, 0],
        {"zz": 1},
        "a",
        None,
    ):
        assert vote_of(bad, plain, SPACE) is None


def test_json_pointers_and_v2_outputs() -> None:
    doc = {"a": [{"b/c": {"~x": 1}}]}
    assert _pointer(doc, "") is doc
    assert _pointer(doc, "/a/0/b~1c/~0x") == 1
    with pytest.raises(Failed):
        _pointer(doc, "/a/1")
    out = {"outputs": [{"name": "p", "shape": [2, 2], "data": [1, 2, 3, 4]}]}
    assert _rows(out, "p", 2) == [[1, 2], [3, 4]]
    assert _rows(out, "", 2) == [[1, 2], [3, 4]]
    nested = {"outputs": [{"name": "p", "shape": [2, 2], "data": [[1, 2], [3, 4]]}]}
    assert _rows(nested, "p", 2) == [[1, 2], [3, 4]]
    for bad, rows in (
        (out, 3),
        ({"outputs": []}, 2),
        ({"outputs": [{"shape": [2], "data": [1, 2]}]}, 2),
    ):
        with pytest.raises(Failed):
            _rows(bad, "", rows)
    with pytest.raises(Failed):
        _rows(out, "q", 2)
