"""A trial's body read by the compiled pass (:func:`app.http.bodies.read_trial`), its instance
of experts or of features kept as text, is the body :class:`app.http.bodies.Body` reads, or is
left to it."""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np
import orjson
import pytest
from fastapi.exceptions import RequestValidationError
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core import jsontext
from app.core.errors import BadInput, TrialNotFound
from app.core.jsontext import batch_members
from app.http import bodies
from app.http.bodies import _alike
from app.http.error_status import item_error
from app.http.routers import stream
from app.http.routers.trials import (
    _BATCH_TOP,
    _PREDICT_BATCH_TOP,
    LEARN_BATCH,
    PREDICT_BATCH,
    _instance,
    _many,
    _read_batch,
)
from app.service.trial_calls import Judgement
from models.inputs.batch import RawExperts, RawFeatures

RAW = (RawExperts, RawFeatures)


@pytest.fixture(autouse=True, scope="module")
def compiled_reader() -> None:
    """The compiled reader, as a worker's warm-up leaves it."""
    jsontext.warm()


def text(s: bytes) -> np.ndarray:
    return np.frombuffer(s, dtype=np.uint8)


PREDICT = (
    bodies.Body(bodies.PredictCreate),
    frozenset({"instance", "trial_id", "track"}),
    frozenset({"instance"}),
)
LEARN = (
    bodies.Body(bodies.LearnCreate),
    frozenset({"instance", "label"}),
    frozenset({"instance", "label"}),
)

votes = st.dictionaries(
    st.sampled_from(["e0", "e1", "e2", "ë"]),
    st.one_of(
        st.dictionaries(st.sampled_from(["a", "b"]), st.floats(-2, 2) | st.integers(-3, 3)),
        st.lists(st.floats(0, 1), max_size=3),
        st.sampled_from(["a", 3, None]),
    ),
    max_size=3,
)
features = st.dictionaries(
    st.sampled_from(["0", "7", "07", "x", "-1", "12345678901234567890"]),
    st.floats(-2, 2) | st.integers(-(2**70), 2**70) | st.sampled_from([None, True, "1"]),
    max_size=3,
)
members = st.fixed_dictionaries(
    {},
    optional={
        "instance": st.one_of(
            st.fixed_dictionaries({"experts": votes}),
            st.fixed_dictionaries({"features": features}),
            st.fixed_dictionaries({"experts": votes, "features": st.none() | st.just([1])}),
            st.just({}),
            st.just([]),
        ),
        "trial_id": st.one_of(st.none(), st.text(max_size=6), st.integers(0, 3)),
        "track": st.one_of(st.booleans(), st.just(1), st.none()),
        "label": st.one_of(st.text(max_size=4), st.integers(-(2**64), 2**64), st.booleans()),
        "extra": st.just(1),
    },
)


def read(body: bytes, which: tuple[bodies.Body[Any], frozenset[str]]) -> Any:
    reader = which[0]
    try:
        b = dict(reader.read(body))
    except RequestValidationError:
        return RequestValidationError
    b["instance"] = _instance(b["instance"])
    return b


def fields(b: dict[str, Any]) -> tuple[Any, ...]:
    """The members a handler takes, with their defaults."""
    label = b.get("label")
    return b.get("trial_id"), b.get("track", True), type(label), label


@settings(max_examples=600, deadline=None)
@given(members, st.sampled_from([PREDICT, LEARN]), st.sampled_from([None, 1]))
def test_a_body_read_fast_is_the_body_read_in_full(
    doc: dict[str, Any], which: Any, indent: Any
) -> None:
    body = json.dumps(doc, indent=indent).encode()
    got = bodies.read_trial(body, *which[1:])
    if got is None:
        return  # left to Body.read
    want = read(body, which)
    assert want is not RequestValidationError, body
    assert isinstance(got["instance"], RAW)
    assert got["instance"].document() == want["instance"]
    assert fields(got) == fields(want)


def test_plain_fusion_bodies_are_read_fast_and_odd_ones_left() -> None:
    experts = {"e0": {"a": 0.5, "b": 0.25}, "e1": [0.5, 0.5]}
    plain = [
        (PREDICT, {"trial_id": "t-1", "instance": {"experts": experts}}),
        (PREDICT, {"instance": {"experts": experts}, "track": False, "trial_id": None}),
        (LEARN, {"instance": {"experts": experts}, "label": "a"}),
        (LEARN, {"label": -7, "instance": {"experts": {}}}),
        (LEARN, {"label": 1, "instance": {"features": {"3": 1.0, "x": None}}}),
        (PREDICT, {"instance": {"features": {}}}),
    ]
    for which, doc in plain:
        body = json.dumps(doc).encode()
        got = bodies.read_trial(body, *which[1:])
        assert got is not None, doc
        assert fields(got) == fields(read(body, which))
    odd = [
        (PREDICT, {"instance": {"experts": experts, "features": None}}),
        (PREDICT, {"instance": {"experts": experts}, "label": "a"}),
        (PREDICT, {"instance": {"experts": experts}, "trial_id": "not an id!"}),
        (PREDICT, {"instance": {"experts": experts}, "track": 1}),
        (LEARN, {"instance": {"experts": experts}}),
        (LEARN, {"instance": {"experts": experts}, "label": 2**63}),
        (LEARN, {"instance": {"experts": experts}, "label": "x" * 257}),
        (LEARN, {"instance": {"features": [1]}, "label": "a"}),
    ]
    for which, doc in odd:
        assert bodies.read_trial(json.dumps(doc).encode(), *which[1:]) is None, doc
    assert bodies.read_trial(b'{"instance": {"experts": {}}, "instance": 1}', *PREDICT[1:]) is None
    assert bodies.read_trial(b'{"instance": {"experts": {}}', *PREDICT[1:]) is None


def test_bodies_of_attributes_are_left_before_the_compiled_pass() -> None:
    """A body whose instance cannot be of experts or of features is left to
    :meth:`Body.read` at once; one that may be, or that needs no instance, goes through
    the pass."""
    for required, doc in [
        (PREDICT[2], {"instance": {}}),
        (PREDICT[2], {"instance": {"feature": {"3": 1.0}}}),
        (LEARN[2], {"instance": [], "label": "expert"}),
    ]:
        assert not bodies._may_hold_instance(json.dumps(doc).encode(), required), doc
    for required, doc in [
        (PREDICT[2], {"instance": {"experts": {}}}),
        (PREDICT[2], {"instance": {"features": {"3": 1.0}}}),
        (LEARN[2], {"label": 1, "instance": {"features": {"3": 1.0}, "experts": {}}}),
        (frozenset({"trial_id", "label"}), {"trial_id": "t-1", "label": "a"}),
        # the text is searched, not read: this one takes the pass, which refuses it
        (LEARN[2], {"instance": [0.5, 1], "label": "experts"}),
    ]:
        assert bodies._may_hold_instance(json.dumps(doc).encode(), required), doc


PREDICT_BATCHED = (PREDICT_BATCH, PREDICT[1:], _PREDICT_BATCH_TOP, 1_000)
LEARN_BATCHED = (LEARN_BATCH, LEARN[1:], _BATCH_TOP, 1_000)


def read_batch_in_full(body: bytes, which: Any) -> Any:
    try:
        b = dict(which[0].read(body))
    except RequestValidationError:
        return RequestValidationError
    b["items"] = [{**i, "instance": _instance(i["instance"])} for i in b["items"]]
    return b


plain_predict = st.fixed_dictionaries(
    {"instance": st.fixed_dictionaries({"experts": votes})},
    optional={"trial_id": st.sampled_from(["t1", "t-2", None]), "track": st.booleans()},
)
plain_learn = st.fixed_dictionaries(
    {"instance": st.fixed_dictionaries({"experts": votes}), "label": st.sampled_from(["a", 3])}
)
plain_features = st.fixed_dictionaries(
    {"instance": st.fixed_dictionaries({"features": features})},
    optional={"label": st.sampled_from(["a", 3]), "trial_id": st.sampled_from(["t1", None])},
)
# a batch whose items share a label (its column read at once), plain or not
learn_alike = st.sampled_from(["a", 3, -12, "x" * 256, "x" * 257, 10**18, True]).flatmap(
    lambda label: st.lists(
        st.fixed_dictionaries(
            {"instance": st.fixed_dictionaries({"features": features}), "label": st.just(label)}
        ),
        max_size=40,
    )
)
batches = st.fixed_dictionaries(
    {},
    optional={
        "items": st.one_of(
            st.lists(plain_predict, max_size=40),
            learn_alike,
            st.lists(plain_learn, max_size=40),
            st.lists(plain_features, max_size=40),
            st.lists(plain_predict | plain_learn | plain_features | members, max_size=5),
            st.just({}),
            st.just([1]),
        ),
        "track": st.one_of(st.booleans(), st.none(), st.just(1)),
        "extra": st.just(1),
    },
)


@settings(max_examples=600, deadline=None)
@given(batches, st.sampled_from([PREDICT_BATCHED, LEARN_BATCHED]), st.sampled_from([None, 1]))
def test_a_batch_read_fast_is_the_batch_read_in_full(
    doc: dict[str, Any], which: Any, indent: Any
) -> None:
    body = json.dumps(doc, indent=indent).encode()
    got = bodies.read_batch(body, *which[1], *which[2:])
    if got is None:
        return  # left to Body.read
    items, extras = got
    want = read_batch_in_full(body, which)
    assert want is not RequestValidationError, body
    assert extras.get("track") == want.get("track")
    assert len(items) == len(want["items"]) > 0
    for item, full in zip(items, want["items"], strict=True):
        assert isinstance(item["instance"], RAW)
        assert item["instance"].text is body  # every item read from the one text
        assert item["instance"].document() == full["instance"]
        assert fields(item) == fields(full)
    assert _read_batch(body, *which) == {**extras, "items": items}


def test_plain_fusion_batches_are_read_fast_and_odd_ones_left() -> None:
    experts = {"e0": {"a": 0.5, "b": 0.25}, "e1": [0.5, 0.5]}
    item = {"trial_id": "t-1", "instance": {"experts": experts}}
    many = [{**item, "trial_id": f"t{t}"} for t in range(100)]  # more than the first room
    for doc in ({"items": many}, {"items": [item], "track": False}, {"track": None, "items": many}):
        body = json.dumps(doc).encode()
        got = bodies.read_batch(body, *PREDICT_BATCHED[1], *PREDICT_BATCHED[2:])
        assert got is not None, doc
        full = read_batch_in_full(body, PREDICT_BATCHED)
        assert [fields(i) for i in got[0]] == [fields(i) for i in full["items"]]
        assert [i["instance"].document() for i in got[0]] == [i["instance"] for i in full["items"]]
    learn = {"items": [{"instance": {"experts": experts}, "label": "a"}] * 3}
    assert bodies.read_batch(json.dumps(learn).encode(), *LEARN_BATCHED[1], *LEARN_BATCHED[2:])
    # items alike are read member by member, others one by one, to the same items
    alike = [{"instance": {"features": {"3": t / 4}}, "label": t % 3} for t in range(50)]
    unlike = [{"label": 1, "instance": {"features": {"3": 1}}}, *alike[1:]]
    for doc, together in (({"items": alike}, True), ({"items": unlike}, False)):
        body = json.dumps(doc).encode()
        *_, counts, rows, instances = batch_members(text(body), 100)
        assert (_alike(body, counts, rows, instances, *LEARN[1:]) is not None) is together
        got = bodies.read_batch(body, *LEARN_BATCHED[1], *LEARN_BATCHED[2:])
        assert got is not None and all(isinstance(i["instance"], RawFeatures) for i in got[0])
        full = read_batch_in_full(body, LEARN_BATCHED)
        assert [fields(i) for i in got[0]] == [fields(i) for i in full["items"]]
        assert [i["instance"].document() for i in got[0]] == [i["instance"] for i in full["items"]]
    # keys of one length and kind, but not the same: not alike
    x = {"features": {"1": 1}}
    body = json.dumps({"items": [{"instance": x, "aa": "1"}, {"instance": x, "bb": "2"}]}).encode()
    *_, counts, rows, instances = batch_members(text(body), 100)
    some = frozenset({"instance", "aa", "bb"})
    assert _alike(body, counts, rows, instances, some, frozenset({"instance"})) is None
    assert bodies.read_batch(body, some, frozenset({"instance"}), _BATCH_TOP, 9) is not None
    # more items than the most a batch takes: left to Body.read, which says so
    assert bodies.read_batch(json.dumps(learn).encode(), *LEARN_BATCHED[1], _BATCH_TOP, 2) is None
    odd = [
        (PREDICT_BATCHED, {"items": []}),
        (PREDICT_BATCHED, {"items": [item, 1]}),
        (PREDICT_BATCHED, {"items": [item, {"instance": {"features": [1]}}]}),
        (PREDICT_BATCHED, {"items": [item], "track": 1}),
        (PREDICT_BATCHED, {"items": [item], "other": 1}),
        (PREDICT_BATCHED, {"items": {"a": item}}),
        (PREDICT_BATCHED, {"track": True}),
        (LEARN_BATCHED, {"items": [item]}),  # a predict's item, no label
        (LEARN_BATCHED, {"items": [{**item, "label": "a"}]}),  # and a trial id
        (LEARN_BATCHED, {**learn, "track": True}),
    ]
    for which, doc in odd:
        assert bodies.read_batch(json.dumps(doc).encode(), *which[1], *which[2:]) is None, doc
    one = json.dumps(item)
    for body in (
        f'{{"items": [{one}], "items": [{one}]}}',
        f'{{"items": [{one}, {{"trial_id": "a", "trial_id": "b"}}]}}',
        f'{{"items": [{one},]}}',
        f'{{"items": [{one}]',
    ):
        assert bodies.read_batch(body.encode(), *PREDICT_BATCHED[1], *PREDICT_BATCHED[2:]) is None


LABEL = bodies.Body(bodies.LabelCreate)
LABEL_BATCH = bodies.Body(bodies.LabelBatchCreate)
labels = st.fixed_dictionaries(
    {},
    optional={
        "trial_id": st.one_of(
            st.sampled_from(["t-1", "bad id", "", "é", "x" * 300]), st.integers(0, 3), st.none()
        ),
        "label": st.one_of(
            st.text(max_size=3),
            st.sampled_from(["x" * 256, "é" * 257]),
            st.integers(-(2**64), 2**64),
            st.sampled_from([-(2**63), 2**63 - 1, 2**63, 1.0, True, None, [1]]),
        ),
        "extra": st.just(1),
    },
)


def read_in_full(body: bytes, reader: bodies.Body[Any]) -> Any:
    try:
        return dict(reader.read(body))
    except RequestValidationError:
        return RequestValidationError


@settings(max_examples=600, deadline=None)
@given(st.one_of(labels, st.lists(labels, max_size=3).map(lambda i: {"items": i})))
def test_a_label_read_fast_is_the_label_read_in_full(doc: dict[str, Any]) -> None:
    body = json.dumps(doc).encode()
    many = "items" in doc
    got = bodies.read_labels(body) if many else bodies.read_label(body)
    want = read_in_full(body, LABEL_BATCH if many else LABEL)
    if got is None:  # left to Body.read: it refuses it, or it is not plainly one
        return
    assert want is not RequestValidationError, body
    assert got == want


def test_plain_labels_are_read_fast_and_odd_ones_left() -> None:
    plain = [
        {"trial_id": "t-1", "label": "cat"},
        {"label": -(2**63), "trial_id": "a"},
        {"trial_id": "a", "label": "x" * 256},
    ]
    for doc in plain:
        assert bodies.read_label(json.dumps(doc).encode()) == doc
    assert bodies.read_labels(json.dumps({"items": plain}).encode()) == {"items": plain}
    odd = [
        {"trial_id": "t-1"},
        {"trial_id": "t-1", "label": True},
        {"trial_id": "t-1", "label": 2**63},
        {"trial_id": "t-1", "label": 1.0},
        {"trial_id": "t-1", "label": "x" * 257},
        {"trial_id": "not an id!", "label": 1},
        {"trial_id": "t-1", "label": 1, "extra": 1},
    ]
    for doc in odd:
        assert bodies.read_label(json.dumps(doc).encode()) is None, doc
        assert bodies.read_labels(json.dumps({"items": [*plain, doc]}).encode()) is None, doc
    for body in (b"[]", b'{"items": []}', b'{"items": [], "x": 1}', b"{", b'{"trial_id": "a",'):
        assert bodies.read_label(body) is None
        assert bodies.read_labels(body) is None


class Parsed(stream.Request):
    """A stream message read as a document, never as text."""

    def _plain(self, raw: str | bytes, most_label: int) -> bool:
        return False


messages = st.fixed_dictionaries(
    {"op": st.sampled_from(["predict", "learn", "label", "nope"])},
    optional={
        "id": st.one_of(st.none(), st.text(max_size=3), st.integers(-5, 5), st.booleans()),
        "instance": st.one_of(
            st.fixed_dictionaries({"experts": votes}),
            st.fixed_dictionaries({"features": features}),
            st.just({}),
        ),
        "trial_id": st.one_of(st.none(), st.sampled_from(["t1", "bad id"])),
        "track": st.one_of(st.booleans(), st.just(0)),
        "label": st.one_of(st.sampled_from(["a", "x" * 9]), st.integers(-3, 3), st.none()),
        "idempotency_key": st.just("k1"),
    },
)


@settings(max_examples=600, deadline=None)
@given(messages, st.booleans())
def test_a_stream_message_read_as_text_is_the_message_parsed(
    doc: dict[str, Any], as_str: bool
) -> None:
    raw: str | bytes = json.dumps(doc) if as_str else json.dumps(doc).encode()
    got, want = stream.Request(raw, "m", 8), Parsed(raw, "m", 8)
    assert (got.id, got.op, got.key, got.idem) == (want.id, want.op, want.key, want.idem)
    assert str(got.error) == str(want.error)
    instance, other = got.args
    if isinstance(instance, RAW):  # read as text
        assert doc["op"] in ("predict", "learn") and got.error is None
        assert instance.document() == want.args[0] and other == want.args[1]
    else:
        assert got.args == want.args


def test_plain_stream_messages_are_read_as_text() -> None:
    for doc in (
        {"op": "learn", "id": 3, "instance": {"experts": {"e0": "a"}}, "label": "a"},
        {"op": "predict", "id": "p", "instance": {"experts": {"e0": [1, 0]}}, "trial_id": "t"},
    ):
        r = stream.Request(json.dumps(doc), "m", 8)
        assert r.error is None and isinstance(r.args[0], RawExperts)


JUDGED = st.builds(
    Judgement,
    predicted=st.sampled_from(["cat", "dog", 1]),
    label=st.sampled_from(["cat", "dog", -1]),
    mistake=st.booleans(),
    updated=st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 4), max_size=12),
    st.lists(JUDGED, min_size=2, max_size=2),
    st.data(),
)
def test_a_batch_answer_writes_shared_judgements_as_each_item_alone(
    picks: list[int], judged: list[Judgement], data: Any
) -> None:
    """A batch's answer in which items share a judgement object reads as the answer
    built item by item: shared judgements, other results and errors, in order."""
    others: list[Any] = [
        {"trial_id": "t", "predicted": "dog"},
        BadInput("label", "not a label of this model"),
        TrialNotFound("no pending trial 't'"),
    ]
    results = [[*judged, *others][p] for p in picks]
    want = {
        "items": [
            {"result": None, "error": item_error(r, f"items.{i}.")}
            if isinstance(r, Exception)
            else {"result": dict(r), "error": None}
            for i, r in enumerate(results)
        ]
    }
    assert json.loads(orjson.dumps(_many(results))) == json.loads(orjson.dumps(want))


@pytest.mark.parametrize("label", ["x" * 256, "x" * 257, "a", 3, -12, 2**62, True, None, 1.5])
def test_a_batch_whose_items_share_a_label_reads_it_as_read_in_full(label: Any) -> None:
    """The label column of a batch is read at once: as in full, or left to it (a plain
    one is not)."""
    item = {"instance": {"features": {"1": 1.0}}, "label": label}
    body = json.dumps({"items": [item] * 3}).encode()
    got = bodies.read_batch(body, *LEARN_BATCHED[1], *LEARN_BATCHED[2:])
    want = read_batch_in_full(body, LEARN_BATCHED)
    if got is None:  # left to the full read
        assert label not in ("x" * 256, "a", 3, -12), label  # a plain label is not
        return
    assert want is not RequestValidationError
    assert [fields(i) for i in got[0]] == [fields(i) for i in want["items"]]


def test_before_the_reader_is_compiled_bodies_are_read_in_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process whose reader is not compiled yet (no warm-up) reads every trial body
    with the full parser, and starts compiling the reader off the caller's thread; once
    compiled, bodies are read fast again."""
    fresh = threading.Event()
    monkeypatch.setattr(jsontext, "_compiled", fresh)
    body = json.dumps({"instance": {"experts": {"e0": "a"}}, "label": "a"}).encode()
    batch = json.dumps({"items": [{"instance": {"experts": {}}, "label": "a"}]}).encode()
    with jsontext._compiling:  # as while another thread compiles the reader
        assert bodies.read_trial(body, *LEARN[1:]) is None  # the caller reads it in full
        assert bodies.read_batch(batch, *LEARN_BATCHED[1], *LEARN_BATCHED[2:]) is None
    assert not fresh.is_set()
    assert bodies.read_trial(body, *LEARN[1:]) is None  # and this call starts compiling
    assert fresh.wait(60)
    got = bodies.read_trial(body, *LEARN[1:])
    assert got is not None and fields(got) == fields(read(body, LEARN))


def test_while_a_warm_up_compiles_bodies_are_read_in_full_and_nothing_compiles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While a worker's warm-up holds the readers (it compiles them among the kernels that
    read votes from text), every body is read in full, compiled reader or not, and no call
    starts a compile of its own: two threads calling a kernel numba is compiling race (one
    reads its signatures while the other adds one)."""
    fresh = threading.Event()
    monkeypatch.setattr(jsontext, "_compiled", fresh)
    body = json.dumps({"instance": {"experts": {"e0": "a"}}, "label": "a"}).encode()
    started = threading.Thread.start
    starts: list[str] = []
    monkeypatch.setattr(threading.Thread, "start", lambda t: (starts.append(t.name), started(t))[1])
    jsontext.hold()
    try:
        assert bodies.read_trial(body, *LEARN[1:]) is None
        assert starts == [] and not fresh.is_set()  # nothing started compiling
        jsontext.warm()  # the warm-up's own compile
        assert fresh.is_set()
        assert bodies.read_trial(body, *LEARN[1:]) is None  # still held
    finally:
        jsontext.release()
    got = bodies.read_trial(body, *LEARN[1:])
    assert got is not None and fields(got) == fields(read(body, LEARN))


# a stream's learn bodies: plain or not, and pieces of plain ones (a body cut in two)
learn_bodies = st.lists(
    st.tuples(plain_learn | plain_features | members, st.sampled_from([None, 1])).map(
        lambda d: json.dumps(d[0], indent=d[1]).encode()
    ),
    min_size=1,
    max_size=8,
).flatmap(
    lambda bs: st.one_of(
        st.just(bs),
        st.integers(0, max(0, len(bs[0]) - 1)).map(lambda at: [bs[0][:at], bs[0][at:], *bs[1:]]),
    )
)


@settings(max_examples=600, deadline=None)
@given(learn_bodies)
def test_bodies_read_together_are_each_body_read_alone(raws: list[bytes]) -> None:
    got = bodies.read_trials(raws, *LEARN[1:])
    alone = [bodies.read_trial(r, *LEARN[1:]) for r in raws]
    if got is None:
        # left to be read one by one; only when one of them is not plainly a trial
        assert None in alone
        return
    assert len(got) == len(raws)
    for item, one in zip(got, alone, strict=True):
        assert one is not None
        assert item["instance"].document() == one["instance"].document()
        assert fields(item) == fields(one)


def test_a_body_cannot_close_or_open_another_bodys_trial() -> None:
    """Joined as a batch's items, no body may carry a trial into the next one, hold two,
    or end the batch: each such set is left to be read one by one."""
    ok = b'{"instance": {"experts": {"e0": "a"}}, "label": "a"}'
    two = b"%s,%s" % (ok, ok)
    assert bodies.read_trials([ok, ok], *LEARN[1:]) is not None
    crafted = [
        # a body ending with another's instance, and the next with its label
        [b'%s,{"instance": {"experts": {"e0": "a"}}' % ok, b'"label": "experts"}'],
        # a trial's array left open, closed by the next body: one trial out of two
        [b'{"label": "a", "instance": {"features": {"0": [{}', b"{}]}}}", two],
        [b'{"instance": {"experts": {"e0": "a"}}, "label": "a"', b"}"],
        [ok[:-1] + b', "label2": {', b'{"a": 1}}}'],
        [two, ok[:20]],
        [ok + b"]}"],
        [ok + b'], "track": true, "x": [{', b"}]}"],
        [b'{"instance": {"experts": {"e0": "a}}', b'{"x": "b"}}, "label": "a"}'],
    ]
    for raws in crafted:
        assert bodies.read_trials(raws, *LEARN[1:]) is None, raws
