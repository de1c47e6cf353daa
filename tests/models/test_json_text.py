"""The compiled readers of JSON text: what they accept, a JSON parser reads to the same
document; what they read, the parsed document gives too."""

from __future__ import annotations

import json
import math
import random
import re
from typing import Any

import numpy as np
from _same import assert_same_experts
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_batch_encode import (
    assert_identical,
    assert_identical_attributes,
    attribute_batches,
    attribute_spaces,
    outcome,
    vote_batches,
    vote_spaces,
)

from app.core.jsontext import (
    FORM_EXPERTS,
    FORM_FEATURES,
    MAX_MEMBERS,
    batch_members,
    members,
    trial_members,
)
from models.inputs.batch import RawExperts, RawFeatures, raw_expert_votes, raw_sparse_attributes
from models.inputs.space import InputSpace
from models.kernels.jsontext import (
    KIND_FLOAT,
    KIND_INT,
    KIND_OBJECT,
    SCAN,
    UNCOUNTED,
    _count,
    _number,
)


def text(s: str | bytes) -> np.ndarray:
    return np.frombuffer(s.encode() if isinstance(s, str) else s, dtype=np.uint8)


def read_number(s: str) -> float | None:
    end, _, value = _number(text(s), 0, len(s))
    return None if end != len(s) else value


NUMERAL = r"-?(0|[1-9][0-9]{0,20})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?"


def check_number(s: str) -> bool:
    """A numeral read is the double a parser gives, its sign too; refused (False), it is
    left to the parser."""
    got = read_number(s)
    want = json.loads(s)
    if got is None:  # refused: left to the parser
        return False
    assert isinstance(got, float), s
    assert got == float(want) and math.copysign(1, got) == math.copysign(1, float(want)), s
    return True


@settings(max_examples=200, deadline=None)
@given(st.from_regex(NUMERAL, fullmatch=True))
@example("-0")
@example("-0.0")
@example("0.1")
@example("9007199254740993")
@example("123456789012345678")
@example("1e22")
@example("1e23")
@example("4.9e-324")
def test_a_number_read_is_the_double_a_parser_gives(s: str) -> None:
    check_number(s)


def numerals(rng: random.Random, n: int) -> list[str]:
    """``n`` numerals of the grammar ``NUMERAL``, short and long: each of one pool of
    digits, any, or mostly zeros or nines or fives (carries, ties, trailing zeros)."""
    out = []
    for _ in range(n):
        pool = rng.choice(("0123456789", "0123456789", "0", "9", "09", "05", "1"))
        s = rng.choice(("", "-"))
        if rng.random() < 0.25:
            s += "0"
        else:
            s += rng.choice(pool.strip("0") or "123456789")
            s += digits(rng, pool, rng.randint(0, rng.choice((3, 20))))
        if rng.random() < 0.5:
            s += "." + digits(rng, pool, rng.randint(1, rng.choice((3, 20))))
        if rng.random() < 0.5:
            s += rng.choice("eE") + rng.choice(("", "+", "-"))
            s += digits(rng, pool, rng.randint(1, 3))
        out.append(s)
    return out


def digits(rng: random.Random, pool: str, k: int) -> str:
    return "".join([rng.choice(pool) for _ in range(k)])


def test_numbers_of_a_seeded_sweep_are_the_doubles_a_parser_gives() -> None:
    """Many more numerals than the test above draws, of the same grammar."""
    sweep = numerals(random.Random(1), 50_000)
    assert all(re.fullmatch(NUMERAL, s) for s in sweep)
    read = {s for s in sweep if check_number(s)}
    assert len(read) > 10_000  # distinct numerals read, not refused


def test_plain_numbers_are_read_and_others_refused() -> None:
    assert read_number("0.6123") == 0.6123
    assert read_number("-12") == -12.0
    assert read_number("2.5E-3") == 0.0025
    zero, negative_zero = read_number("-0"), read_number("-0.0")
    assert zero == 0.0 and math.copysign(1, zero) == 1.0  # the integer 0
    assert negative_zero == 0.0 and math.copysign(1, negative_zero) == -1.0
    for refused in ("01", "1.", ".5", "1e", "+1", "1234567890123456789", "1e400", "0.1e-30"):
        assert read_number(refused) is None, refused
    b = text("3.5")
    assert _number(b, 0, 3)[1] == KIND_FLOAT and _number(text("35"), 0, 2)[1] == KIND_INT


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=20,
)


def mutations(s: str) -> list[str]:
    """``s`` cut short, and with each of a few bytes dropped or replaced."""
    out = [s[:i] for i in range(len(s))]
    for i in range(0, len(s), max(1, len(s) // 8)):
        out += [s[:i] + s[i + 1 :], s[:i] + "," + s[i + 1 :], s[:i] + "}" + s[i:]]
    return out


def parsed(s: str) -> Any:
    try:
        return json.loads(s)
    except ValueError:
        return ValueError


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=4), json_values, max_size=5), st.sampled_from([None, 0, 2]))
def test_members_accept_only_json_and_find_its_members(doc: dict[str, Any], indent: Any) -> None:
    s = json.dumps(doc, indent=indent)
    n, spans = members(text(s), 0, len(s), True)
    if n >= 0:  # accepted: the members a parser finds, in order
        raw = s.encode()
        keys = [raw[a:b].decode() for a, b, *_ in spans[:n].tolist()]
        assert keys == list(doc)
        values = [json.loads(raw[c:d]) for _, _, c, d, _ in spans[:n].tolist()]
        assert values == list(doc.values())
    else:  # refused: an escape, non-ASCII text, a number outside the exact subset
        assert "\\" in s or not s.isascii() or any(isinstance(v, int | float) for v in _leaves(doc))
    for bad in mutations(s):
        if parsed(bad) is ValueError:
            assert members(text(bad), 0, len(bad), True)[0] < 0, bad


def _leaves(v: Any) -> list[Any]:
    if isinstance(v, dict):
        return [x for w in v.values() for x in _leaves(w)]
    if isinstance(v, list):
        return [x for w in v for x in _leaves(w)]
    return [v]


def test_a_key_given_twice_and_deep_nesting_are_refused() -> None:
    assert members(text('{"a": 1, "a": 1}'), 0, 16, True)[0] < 0
    deep = '{"a": ' + "[" * 40 + "]" * 40 + "}"
    assert members(text(deep), 0, len(deep), True)[0] < 0
    assert members(text('{"a": 1} {}'), 0, 11, True)[0] < 0
    assert members(text('{"a": 1} {}'), 0, 11, False)[0] == 1


def as_text(
    payload: Any, spaced: bool, raw: type[RawExperts] | type[RawFeatures] = RawExperts
) -> RawExperts | RawFeatures | None:
    """The payload's experts (or features) object as JSON text, when it is one, and JSON
    the readers accept."""
    if not isinstance(payload, dict) or type(payload.get(raw.MEMBER)) is not dict:
        return None
    try:
        s = json.dumps(payload[raw.MEMBER], indent=1 if spaced else None, allow_nan=False)
    except ValueError:
        return None
    n, _ = members(text(s), 0, len(s), False)
    return raw(s.encode(), 0, len(s)) if n >= 0 else None


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_votes_read_from_text_are_as_encode_gives_them(data: st.DataObject) -> None:
    space = data.draw(vote_spaces())
    batch = [p for p in data.draw(vote_batches(space)) if type(p["experts"]) is dict]
    spaced = data.draw(st.booleans())
    raw = [as_text(p, spaced) for p in batch]
    kept = [(p, r) for p, r in zip(batch, raw, strict=True) if r is not None]
    if not kept:
        return
    want = [outcome(space, {"experts": json.loads(r.text)}, "experts") for _, r in kept]
    for got, w in zip(space.encode_each([r for _, r in kept], "experts"), want, strict=True):
        assert_identical(got, w)
    for (_, r), w in zip(kept, want, strict=True):  # each alone, as a lone request's
        assert_identical(space.encode_each([r], "experts")[0], w)
    # texts and documents in one batch
    mixed = [r if i % 2 else p for i, (p, r) in enumerate(kept)]
    want = [
        w if i % 2 else outcome(space, p, "experts")
        for i, (w, (p, _)) in enumerate(zip(want, kept, strict=True))
    ]
    for got, w in zip(space.encode_each(mixed, "experts"), want, strict=True):
        assert_identical(got, w)


def test_plain_texts_are_read_by_the_compiled_reader() -> None:
    space = InputSpace(["a", "b", "c"], experts={"expert_names": ["x", "y"]})
    texts = [
        b'{"x": {"a": 0.5, "b": 0.25, "c": 0}, "y": {"a": 1, "b": 0.0, "c": 2e0}}',
        b'{ "y" : {"c": 0.5} , "x": {"b": 1.0, "a": 0.25} }',
        b'{"x": [0.5, 0.25, 0.0], "y": [1, 0, -2]}',
        b'{"x": {"b": 1}, "y": [1, 0, 0]}',
        b'{"x": "c", "y": {"b": 1}}',
    ]
    items = [RawExperts(t, 0, len(t)) for t in texts]
    got = space._raw_votes_each(items)
    assert got is not None  # read from the text, not parsed
    for x, t in zip(got, texts, strict=True):
        assert_same_experts(x, space.encode({"experts": json.loads(t)}, "experts"))
    body = b'{"trial_id": "t", "instance": {"experts": ' + texts[0] + b"}}"
    at = body.index(b'{"x"')
    assert space._raw_votes_each([RawExperts(body, at, at + len(texts[0]))]) is not None
    for refused in (
        b'{"x": "z"}',
        b'{"x": 1}',  # an integer: the labels are strings
        b'{"ghost": {"a": 1}}',
        b'{"x": {"a": 1, "a": 2}}',
        b'{"x": {"a": 1}, "x": {"b": 1}}',
        b'{"x": {}}',
        b"{}",
        b'{"x": [1, 0]}',
    ):
        raw = RawExperts(refused, 0, len(refused))
        assert space._raw_votes_each([raw]) is None, refused
        assert space._raw_one(raw, "experts") is None, refused
        # alone, it is answered as encode answers its document
        want = outcome(space, {"experts": json.loads(refused)}, "experts")
        assert_identical(space.encode_each([raw], "experts")[0], want)
    for t in texts:  # alone, each read by the call for one
        raw = RawExperts(t, 0, len(t))
        one = space._raw_one(raw, "experts")
        assert one is not None
        assert_same_experts(one, space.encode({"experts": json.loads(t)}, "experts"))
        assert not one.expert.flags.writeable and not one.value.flags.writeable


def test_the_votes_take_the_memory_of_the_votes_sent() -> None:
    """However long the text, the score matrix holds a row per vote and no more; rows
    for every expert of every object are only set aside while they are few."""
    names = [f"x{i}" for i in range(20)]
    assert len(names) * 1000 > UNCOUNTED  # so the members are counted first
    space = InputSpace(list(range(1000)), experts={"expert_names": names})
    padded = b'{"x0": {"3": 1}' + b" " * 100_000 + b"}"
    assert space._raw_votes_each([RawExperts(padded, 0, len(padded))]) is not None
    assert space._tables is not None
    got = raw_expert_votes([RawExperts(padded, 0, len(padded))], *space._tables, 1000)
    assert got is not None and got.scores.shape == (1, 1000)
    # the rows allocated: the members counted, not a bound from the text's length
    assert _count(text(padded), 0, len(padded)) == 1
    nested = b'{"x": {"3": 1, "4": [1, "a,b", {"c": 2}]}, "y": [1, 2]}'
    assert _count(text(nested), 0, len(nested)) == 2


def test_integer_labels_are_read_as_integers_and_as_strings() -> None:
    space = InputSpace([-1, 0, 7], experts={"expert_names": ["x", "y"]})
    for t in (b'{"x": 7, "y": -1}', b'{"x": "7", "y": "0"}', b'{"x": {"7": 1}, "y": 0}'):
        got = space._raw_votes_each([RawExperts(t, 0, len(t))])
        assert got is not None, t
        assert_same_experts(got[0], space.encode({"experts": json.loads(t)}, "experts"))
    for t in (b'{"x": -0}', b'{"x": 7.0}', b'{"x": 8}', b'{"x": true}'):
        assert space._raw_votes_each([RawExperts(t, 0, len(t))]) is None, t


def test_trial_members_find_the_experts_or_features_of_an_instance_alone() -> None:
    body = b'{"label": 1, "instance": {"experts": {"x": [1]}}}'
    n, spans, a, z, form = trial_members(text(body))
    assert n == 2 and body[a:z] == b'{"x": [1]}' and form == FORM_EXPERTS
    assert spans[1, :2].tolist() == [body.index(b"instance"), body.index(b"instance") + 8]
    body = b'{"instance": {"features": {"3": 1.5}}, "label": 1}'
    n, spans, a, z, form = trial_members(text(body))
    assert n == 2 and body[a:z] == b'{"3": 1.5}' and form == FORM_FEATURES
    for other in (
        b'{"instance": {"experts": {"x": [1]}, "features": null}}',
        b'{"instance": {"experts": null}}',
        b'{"instances": {"experts": {}}}',
        b'{"instance": {"expert": {}}}',
        b'{"instance": {"features": [1, 0]}}',
        b'{"instance": {"features": {"1": 1}, "experts": {}}}',
    ):
        assert trial_members(text(other))[0] == 1 and trial_members(text(other))[2:] == (-1,) * 3
    assert trial_members(text(b'{"instance": {"experts": {}}'))[0] < 0


def trial_by_members(b: np.ndarray, a: int, z: int) -> tuple[int, np.ndarray, int, int, int]:
    """What :func:`trial_members` finds in the trial at ``b[a:z]``, found with
    :func:`members` alone: the trial's members, then its instance's."""
    n, spans = members(b, a, z, False)
    none = (-1, -1, -1)
    for k0, k1, v0, v1, _ in spans[: max(n, 0)].tolist():
        if bytes(b[k0:k1]) == b"instance" and bytes(b[v0 : v0 + 1]) == b"{":
            m, inner = members(b, v0, v1, False)
            if m < 0:  # an instance of a key twice, or of too many members: refused
                return m, spans, *none
            if m == 1 and inner[0, 4] == KIND_OBJECT:
                form = {b"experts": FORM_EXPERTS, b"features": FORM_FEATURES}.get(
                    bytes(b[inner[0, 0] : inner[0, 1]])
                )
                if form is not None:
                    return n, spans, int(inner[0, 2]), int(inner[0, 3]), form
    return n, spans, *none


trial_docs = st.fixed_dictionaries(
    {},
    optional={
        "label": json_values,
        "trial_id": json_values,
        "instance": st.one_of(
            json_values,
            st.dictionaries(st.sampled_from(["experts", "features"]), json_values, max_size=2),
            # about as many members as an object may have (MAX_MEMBERS), of values
            # the readers take
            st.dictionaries(
                st.text("abc", max_size=3),
                st.integers(0, 9) | st.none(),
                min_size=MAX_MEMBERS - 1,
                max_size=MAX_MEMBERS + 2,
            ),
        ),
    },
)


@settings(max_examples=400, deadline=None)
@given(trial_docs, st.sampled_from([None, 0, 2]))
def test_a_trials_members_and_instance_are_found_in_one_pass_as_members_finds_them(
    doc: dict[str, Any], indent: Any
) -> None:
    """The members of a trial, and its instance's experts or features object, are those
    :func:`members` finds reading the trial and then its instance; any text cut short or
    altered that is not JSON is refused."""
    s = json.dumps(doc, indent=indent)
    for t in [s, *mutations(s)]:
        b = text(t)
        n, spans, e0, e1, form = trial_members(b)
        want_n, want_spans, *want = trial_by_members(b, 0, len(t))
        if want_n >= 0 and members(b, 0, len(t), True)[0] < 0:
            want_n = -1  # more than whitespace after the trial
        assert (n >= 0) == (want_n >= 0), t
        if n >= 0:
            assert n == want_n and (spans[:n] == want_spans[:n]).all(), t
            assert [e0, e1, form] == want, t
        if parsed(t) is ValueError:
            assert n < 0, t


@settings(max_examples=300, deadline=None)
@given(st.lists(trial_docs, max_size=4), st.sampled_from([None, 0, 2]), st.booleans())
def test_a_batchs_items_are_read_each_as_a_trial_in_one_pass(
    items: list[dict[str, Any]], indent: Any, track: bool
) -> None:
    """Each item of a batch is read as :func:`trial_members` reads a trial alone, and
    the batch's members as :func:`members` finds them; a batch whose items are not all
    objects that read so is refused, and so is any altered text that is not JSON."""
    doc: dict[str, Any] = {"items": items, "track": track} if track else {"items": items}
    s = json.dumps(doc, indent=indent)
    for t in [s, *mutations(s)]:
        b = text(t)
        n, spans, m, counts, rows, instances = batch_members(b, 100)
        if parsed(t) is ValueError:
            assert m < 0, t
            continue
        if m < 0:
            continue  # refused: left to the parser (checked for the text unaltered below)
        want_n, want_spans = members(b, 0, len(t), True)
        assert n == want_n and (spans[:n] == want_spans[:n]).all(), t
        keys = [t[k0:k1] for k0, k1, *_ in want_spans[:n].tolist()]
        starts = element_starts(t, int(want_spans[keys.index("items"), 2]))
        assert m == len(starts) == len(counts) == len(rows) == len(instances), t
        for j, a in enumerate(starts):
            k, inner, *instance = trial_by_members(b, a, len(t))
            assert counts[j] == k and (rows[j, :k] == inner[:k]).all(), t
            assert instances[j].tolist() == instance, t
    n, _, m, *_ = batch_members(text(s), 100)
    alone = [trial_members(text(json.dumps(i, indent=indent)))[0] >= 0 for i in items]
    assert (n >= 0 and m == len(items)) == all(alone), s


def element_starts(t: str, a: int) -> list[int]:
    """Where each element of the JSON array opening at ``t[a]`` starts."""
    decoder, out, i = json.JSONDecoder(), [], a + 1
    while True:
        while t[i] in " \n\r\t,":
            i += 1
        if t[i] == "]":
            return out
        out.append(i)
        _, i = decoder.raw_decode(t, i)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_features_read_from_text_are_as_encode_gives_them(data: st.DataObject) -> None:
    space = data.draw(attribute_spaces())
    spaced = data.draw(st.booleans())
    kept = [
        (p, r)
        for p in data.draw(attribute_batches(space))
        if (r := as_text(p, spaced, RawFeatures)) is not None
    ]
    if not kept:
        return
    want = [outcome(space, r.document(), "attributes") for _, r in kept]
    got = space.encode_each([r for _, r in kept], "attributes")
    for x, w in zip(got, want, strict=True):
        assert_identical_attributes(x, w)
    for (_, r), w in zip(kept, want, strict=True):  # each alone, as a lone request's
        assert_identical_attributes(space.encode_each([r], "attributes")[0], w)
    # texts and documents in one batch
    mixed = [r if i % 2 else p for i, (p, r) in enumerate(kept)]
    got = space.encode_each(mixed, "attributes")
    for x, m in zip(got, mixed, strict=True):
        doc = m.document() if isinstance(m, RawFeatures) else m
        assert_identical_attributes(x, outcome(space, doc, "attributes"))


def test_plain_features_are_read_by_the_compiled_reader() -> None:
    space = InputSpace([0, 1], attributes={"n_features": 100, "constant_attribute": True})
    texts = [
        b'{"3": 0.5, "17": -2, "99": 1e1}',
        b'{ "40" : 0.25 , "7": 1.0, "0": 0 }',  # out of order, and a zero
        b'{"007": 1, "8": 0.0}',
        b"{}",
    ]
    got = raw_sparse_attributes([RawFeatures(t, 0, len(t)) for t in texts], 100, True)
    assert all(x is not None for x in got)  # read from the text, not parsed
    for x, t in zip(got, texts, strict=True):
        assert_identical_attributes(x, space.encode({"features": json.loads(t)}, "attributes"))
    assert [x.indices.tolist() for x in got if x is not None][1] == [7, 40, 100]
    refused = [
        b'{"100": 1}',  # out of range
        b'{"3": 1, "03": 2}',  # an index twice
        b'{"3": 1, "3": 2}',  # a key twice: a parser keeps the last
        b'{"x": 1}',
        b'{"-1": 1}',
        b'{"1234567890123456789": 1}',
        b'{"3": true}',
        b'{"3": null}',
        b'{"3": "1"}',
        b'{"3": [1]}',
        b'{"3": 12345678901234567890}',
        b'{"3": 0.1e-30}',
    ]
    items = [RawFeatures(t, 0, len(t)) for t in [texts[0], *refused, texts[1]]]
    got = raw_sparse_attributes(items, 100, True)
    assert got[0] is not None and got[-1] is not None, "a refused row leaves the others read"
    assert got[1:-1] == [None] * len(refused)
    # and encode_each answers each refused one as encode answers its document
    every = [texts[0], *refused, texts[1]]
    for x, t in zip(space.encode_each(items, "attributes"), every, strict=True):
        assert_identical_attributes(x, outcome(space, {"features": json.loads(t)}, "attributes"))
    # alone too: read by the call for one, or refused by it and parsed
    for item, t in zip(items, every, strict=True):
        one = space._raw_one(item, "attributes")
        assert (one is None) == (t in refused), t
        want = outcome(space, {"features": json.loads(t)}, "attributes")
        assert_identical_attributes(space.encode_each([item], "attributes")[0], want)
        if one is not None:
            assert_identical_attributes(one, want)
            assert not one.indices.flags.writeable and not one.values.flags.writeable


def test_the_readers_stay_linear_on_hostile_texts() -> None:
    """An object of many members, and names far from where they are expected, are left
    to the parser, whose answer is the same."""
    many = "{" + ", ".join(f'"k{i}": {i}' for i in range(MAX_MEMBERS + 1)) + "}"
    assert members(text(many), 0, len(many), True)[0] < 0
    assert (
        members(text(many[: many.index(f', "k{MAX_MEMBERS}"')] + "}"), 0, len(many), False)[0]
        == MAX_MEMBERS
    )
    labels = list(range(SCAN + 8))
    space = InputSpace(labels, experts={"expert_names": ["x"]})
    near = json.dumps({"x": {str(c): 1.0 for c in labels}}).encode()
    far = json.dumps({"x": {str(c): 1.0 for c in reversed(labels)}}).encode()
    assert space._raw_votes_each([RawExperts(near, 0, len(near))]) is not None
    assert space._raw_votes_each([RawExperts(far, 0, len(far))]) is None
    got = space.encode_each([RawExperts(far, 0, len(far))], "experts")[0]
    assert_same_experts(got, space.encode({"experts": json.loads(far)}, "experts"))
