"""ECOC (lecture notes Committee Machines; Dietterich & Bakiri 1995): the lecture's codes and
decoding example, random codes, learning, state and contract."""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pytest

from models import registry
from models.core.instance import InvalidInstance
from models.core.learner import Learner
from models.core.params import InvalidParameter
from models.core.state import InvalidState, encode_array
from models.ensembles.ecoc import (
    ECOC,
    dense_code,
    exhaustive_code,
    hamming_decode,
    hamming_distances,
    loss_decode,
    losses,
    min_row_distance,
    one_per_class_code,
    random_code,
)


@pytest.fixture(autouse=True)
def _registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """clone() and from_state() build through the registry."""
    monkeypatch.setitem(registry.KINDS, "ecoc", ECOC)


def _state(learner: Learner) -> str:
    return json.dumps(learner.export_state(), sort_keys=True)


def _rows(code: np.ndarray) -> list[str]:
    return ["".join(str(int(b)) for b in row) for row in code]


def _columns_ok(code: np.ndarray) -> bool:
    """No constant column, and no two columns equal or complementary."""
    cols = {tuple(int(b) for b in col) for col in code.T}
    constant = any(len(set(col)) == 1 for col in cols)
    complementary = any(tuple(1 - b for b in col) in cols for col in cols)
    return len(cols) == code.shape[1] and not constant and not complementary


# -- codes: the exhaustive code and the examples of the Committee Machines lecture -----------


def test_exhaustive_code_for_five_classes_is_s3s_table() -> None:
    assert _rows(exhaustive_code(5)) == [
        "111111111111111",  # the lecture prints 16 ones: a typo
        "000000001111111",
        "000011110000111",
        "001100110011001",
        "010101010101010",
    ]


@pytest.mark.parametrize(
    ("k", "distance", "length"), [(3, 2, 3), (4, 4, 7), (5, 8, 15), (6, 16, 31)]
)
def test_exhaustive_code_distance_and_length(k: int, distance: int, length: int) -> None:
    code = exhaustive_code(k)
    assert code.shape == (k, length)
    assert min_row_distance(code) == distance == 2 ** (k - 2)
    assert _columns_ok(code)
    for i in range(1, k):  # entry (i, l) = floor(l / 2^(k-i)) mod 2, rows counted from 1
        assert [int(b) for b in code[i]] == [(j >> (k - i - 1)) & 1 for j in range(length)]


def test_exhaustive_code_limits() -> None:
    assert exhaustive_code(2).tolist() == [[1], [0]]
    assert exhaustive_code(11).shape == (11, 1023)
    with pytest.raises(InvalidParameter, match="exhaustive"):
        exhaustive_code(12)
    with pytest.raises(InvalidParameter) as info:
        ECOC({"kind": "perceptron"}, n_features=3, labels=list(range(12)), code="exhaustive")
    assert info.value.name == "code" and "'random'" in str(info.value)


def test_s3_redundant_code_has_distance_four() -> None:
    code = np.array([[int(b) for b in w] for w in S3_CODE])
    assert min_row_distance(code) == 4


S3_CODE = ["1010011100", "0100011101", "1001100011", "1011111010"]


def test_s3_decoding_example_gives_c1() -> None:
    """The lecture says c4, which contradicts its own codewords; Hamming decoding gives c1."""
    code = np.array([[int(b) for b in w] for w in S3_CODE])
    bits = np.array([int(b) for b in "1010011101"])
    assert hamming_distances(bits, code).tolist() == [1, 3, 7, 5]
    assert hamming_decode(bits, code) == 0


def test_hamming_ties_go_to_the_smallest_class() -> None:
    code = one_per_class_code(4)
    assert hamming_decode([0, 0, 0, 0], code) == 0  # every class at distance 1
    assert hamming_decode([0, 1, 1, 0], code) == 1
    assert hamming_decode([0, 0, 1, 0], code) == 2


def test_loss_decoding() -> None:
    code = exhaustive_code(3)  # 111 / 001 / 010
    margins = np.array([0.5, -2.0, 1.0])
    # class c pays |m_l| wherever the margin's sign disagrees with 2 M[c][l] - 1
    assert losses(margins, code).tolist() == [2.0, 0.5, 3.5]
    assert loss_decode(margins, code) == 1
    assert loss_decode(np.zeros(3), code) == 0  # all tie at 0


def test_one_per_class_and_dense_codes() -> None:
    assert one_per_class_code(3).tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    assert min_row_distance(one_per_class_code(6)) == 2
    for k, bits in [(2, 1), (3, 2), (4, 2), (5, 3), (8, 3), (9, 4), (100, 7)]:
        code = dense_code(k)
        assert code.shape == (k, bits)
        assert min_row_distance(code) == 1
        assert _columns_ok(code)
    assert _rows(dense_code(5)) == ["000", "001", "010", "011", "100"]


# -- random codes --------------------------------------------------------------------------------


@pytest.mark.parametrize(("k", "length"), [(2, 1), (3, 3), (4, 5), (5, 15), (8, 30), (20, 44)])
def test_random_codes_are_valid_and_seeded(k: int, length: int) -> None:
    code = random_code(k, length, np.random.default_rng(5), n_tries=5)
    assert code.shape == (k, length) and set(np.unique(code)) <= {0, 1}
    assert _columns_ok(code)
    again = random_code(k, length, np.random.default_rng(5), n_tries=5)
    np.testing.assert_array_equal(code, again)


def test_random_code_keeps_the_first_best_try() -> None:
    k, length = 10, 12
    rng = np.random.default_rng(0)
    tries = [random_code(k, length, rng, n_tries=1) for _ in range(8)]  # the same draws
    distances = [min_row_distance(c) for c in tries]
    assert len(set(distances)) > 1
    best = random_code(k, length, np.random.default_rng(0), n_tries=8)
    np.testing.assert_array_equal(best, tries[distances.index(max(distances))])


def test_random_code_with_every_column_is_the_exhaustive_code_up_to_order() -> None:
    code = random_code(5, 15, np.random.default_rng(1), n_tries=1)
    assert min_row_distance(code) == 8
    canonical = {tuple(col if col[0] == 1 else 1 - col) for col in code.T}
    assert canonical == {tuple(col) for col in exhaustive_code(5).T}


def test_random_code_length_is_checked() -> None:
    with pytest.raises(InvalidParameter, match="7 distinct columns"):
        random_code(4, 8, np.random.default_rng(0))
    with pytest.raises(InvalidParameter) as info:
        ECOC({"kind": "perceptron"}, 3, labels=list("abcd"), code="random", length=8)
    assert info.value.name == "length"


def test_ecoc_random_code_from_the_seed() -> None:
    def make(seed: int) -> ECOC:
        return ECOC({"kind": "perceptron"}, 4, list(range(9)), code="random", seed=seed)

    a, b, c = make(3), make(3), make(4)
    np.testing.assert_array_equal(a.code_, b.code_)
    assert not np.array_equal(a.code_, c.code_)
    assert a.code_.shape == (9, 32)  # default length max(ceil(10 log2 9), 9) = 32
    assert ECOC({"kind": "perceptron"}, 4, list(range(9))).code_.shape == (9, 32)  # auto: random
    assert ECOC({"kind": "perceptron"}, 4, list(range(7))).code_.shape == (7, 63)  # exhaustive


# -- parameters ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"learner": {"kind": "committee"}}, "learner"),
        ({"learner": {"kind": "subexpert", "learner": {"kind": "perceptron"}}}, "learner"),
        ({"learner": {"kind": "nope"}}, "learner.kind"),
        ({"learner": {"kind": "winnow", "alpha": 0.5}}, "learner.alpha"),
        ({"code": "exhaustive", "length": 3}, "length"),
        ({"code": "sparse"}, "code"),
        ({"decoding": "euclid"}, "decoding"),
        ({"code": "random", "n_tries": 0}, "n_tries"),
        ({"seed": -1}, "seed"),
        ({"n_features": 2**25}, "n_features"),  # 7 columns of 2^25 weights
    ],
)
def test_bad_parameters(kwargs: dict[str, Any], name: str) -> None:
    params: dict[str, Any] = {"learner": {"kind": "perceptron"}, "n_features": 3}
    params.update(kwargs)
    with pytest.raises(InvalidParameter) as info:
        ECOC(labels=list("abcd"), **params)
    assert info.value.name == name


def test_spec_is_normalised_and_rebuilds() -> None:
    inner = registry.build({"kind": "winnow", "alpha": 3.0}, labels=["x", "y"], size=99)
    ecoc = ECOC(inner, n_features=4, labels=list("abc"))
    spec = ecoc.spec()
    assert spec["learner"]["kind"] == "winnow" and spec["learner"]["alpha"] == 3.0
    assert "n_features" not in spec["learner"] and "labels" not in spec["learner"]
    assert registry.build(spec).spec() == spec
    assert all(col.labels == (1, -1) and col.input_size == 4 for col in ecoc.columns_)
    assert ecoc.value_range == (0.0, 1.0)
    with pytest.raises(InvalidInstance, match=r"\[0, 1\]"):
        ecoc.learn([2.0], "a")


# -- learning ------------------------------------------------------------------------------------


def _blocks(n: int, k: int, seed: int, width: int = 4, noise: int = 6) -> list[tuple[Any, int]]:
    """Noise-free linear k-class problem: class c lights features in its own block (at
    least one), plus shared irrelevant features; a constant feature comes last. The class
    is the arg-max of the block sums, and every union of classes is linearly separable."""
    rng = np.random.default_rng(seed)
    size = k * width + noise + 1
    out = []
    for _ in range(n):
        c = int(rng.integers(k))
        x = np.zeros(size)
        on = rng.random(width) < 0.5
        on[rng.integers(width)] = True
        x[c * width : (c + 1) * width] = on
        x[k * width : k * width + noise] = rng.random(noise) < 0.5
        x[-1] = 1.0
        out.append((x, c))
    return out


@pytest.mark.parametrize(
    "params",
    [
        {"learner": {"kind": "perceptron"}},
        {"learner": {"kind": "perceptron"}, "decoding": "loss"},
        {"learner": {"kind": "balanced-winnow", "alpha": 1.5}, "code": "one-per-class"},
        {"learner": {"kind": "alma"}, "code": "random", "length": 12, "seed": 1},
        {"learner": {"kind": "winnow", "theta": 4.0}, "code": "dense"},
    ],
)
def test_ecoc_learns_a_noise_free_linear_problem(params: dict[str, Any]) -> None:
    k = 5
    stream = _blocks(3000, k, seed=1)
    ecoc = ECOC(n_features=stream[0][0].size, labels=list(range(k)), **params)
    late = [ecoc.learn(x, y).mistake for x, y in stream][-1000:]
    assert np.mean(late) < 0.03, np.mean(late)


def test_mistake_and_updated_come_from_the_decoder_and_the_columns() -> None:
    stream = _blocks(300, 4, seed=2)
    ecoc = ECOC({"kind": "balanced-winnow", "alpha": 1.3}, stream[0][0].size, [0, 1, 2, 3])
    for x, y in stream:
        predicted = ecoc.predict(x)
        bits = [col.predict(x) == 1 for col in ecoc.columns_]
        assert predicted == hamming_decode(np.array(bits), ecoc.code_.astype(int))
        before = [col.updates_ for col in ecoc.columns_]
        out = ecoc.learn(x, y)
        assert out.mistake == (predicted != y)
        assert out.updated == any(
            col.updates_ > b for col, b in zip(ecoc.columns_, before, strict=True)
        )
        for col, bit in zip(ecoc.columns_, ecoc.code_[y], strict=True):  # every column learnt
            assert col.trials_ == ecoc.trials_
            assert bit in (0.0, 1.0)


def test_scores_are_negative_distances_or_losses() -> None:
    stream = _blocks(200, 3, seed=3)
    for decoding in ("hamming", "loss"):
        ecoc = ECOC({"kind": "perceptron"}, stream[0][0].size, list("abc"), decoding=decoding)
        for x, y in stream[:100]:
            ecoc.learn(x, "abc"[y])
        for x, _ in stream[100:]:
            s = ecoc.scores(x)
            if decoding == "hamming":
                bits = np.array([col.predict(x) == 1 for col in ecoc.columns_])
                assert (-s).tolist() == hamming_distances(bits, ecoc.code_).tolist()
            else:
                m = np.array([col.scores(x)[0] for col in ecoc.columns_])
                np.testing.assert_array_equal(-s, losses(m, ecoc.code_))
            assert ecoc.predict(x) == "abc"[int(np.argmax(s))]


# -- state ---------------------------------------------------------------------------------------


def _trained(params: dict[str, Any] | None = None, n: int = 150) -> tuple[ECOC, list[Any]]:
    stream = _blocks(n + 100, 4, seed=4)
    params = params or {"learner": {"kind": "balanced-winnow", "alpha": 1.4}}
    ecoc = ECOC(n_features=stream[0][0].size, labels=["w", "x", "y", "z"], **params)
    for x, y in stream[:n]:
        ecoc.learn(x, "wxyz"[y])
    return ecoc, [(x, "wxyz"[y]) for x, y in stream[n:]]


@pytest.mark.parametrize(
    "params",
    [
        None,
        {"learner": {"kind": "alma", "p": 3.0}, "code": "random", "length": 6, "decoding": "loss"},
    ],
)
def test_round_trip_through_json_is_exact(params: dict[str, Any] | None) -> None:
    ecoc, rest = _trained(params)
    text = json.dumps(ecoc.export_state())
    copy_ = registry.from_state(json.loads(text))
    assert isinstance(copy_, ECOC)
    assert _state(copy_) == _state(ecoc) and copy_.counters() == ecoc.counters()
    np.testing.assert_array_equal(copy_.weights(), ecoc.weights())
    for x, y in rest:
        assert copy_.predict(x) == ecoc.predict(x)
        np.testing.assert_array_equal(copy_.scores(x), ecoc.scores(x))
        assert copy_.learn(x, y) == ecoc.learn(x, y)
    assert _state(copy_) == _state(ecoc)


def test_random_code_is_taken_from_the_state() -> None:
    params: dict[str, Any] = {"learner": {"kind": "perceptron"}, "code": "random", "length": 6}
    params["seed"] = 9
    ecoc, rest = _trained(params)
    doc = ecoc.export_state()
    other = np.array(ecoc.code_[:, ::-1])  # another valid code: the columns reversed
    doc["arrays"]["code_"] = encode_array(other)
    fresh = ECOC(n_features=ecoc.n_features, labels=ecoc.labels, **params)
    fresh.import_state(doc)
    np.testing.assert_array_equal(fresh.code_, other)
    for x, _ in rest:  # decoding uses the imported code
        bits = np.array([col.predict(x) == 1 for col in fresh.columns_])
        assert fresh.predict(x) == ecoc.labels[hamming_decode(bits, other)]


def _bad_code(code: np.ndarray, how: str) -> np.ndarray:
    code = np.array(code)
    if how == "constant column":
        code[:, 0] = 1.0
    elif how == "duplicate column":
        code[:, 1] = code[:, 0]
    elif how == "complementary column":
        code[:, 1] = 1.0 - code[:, 0]
    elif how == "entry 2":
        code[0, 0] = 2.0
    elif how == "entry 0.5":
        code[1, 1] = 0.5
    elif how == "flipped bit":
        code[2, 3] = 1.0 - code[2, 3]
    return code


@pytest.mark.parametrize(
    ("code", "how"),
    [
        ("exhaustive", "flipped bit"),
        ("exhaustive", "entry 2"),
        ("one-per-class", "flipped bit"),
        ("dense", "entry 0.5"),
        ("random", "constant column"),
        ("random", "duplicate column"),
        ("random", "complementary column"),
        ("random", "entry 0.5"),
    ],
)
def test_bad_codes_are_rejected(code: str, how: str) -> None:
    params: dict[str, Any] = {"learner": {"kind": "perceptron"}, "code": code}
    if code == "random":
        params.update(length=6, seed=2)
    ecoc, _ = _trained(params, n=60)
    before = _state(ecoc)
    doc = ecoc.export_state()
    doc["arrays"]["code_"] = encode_array(_bad_code(ecoc.code_, how))
    with pytest.raises(InvalidState, match="code_"):
        ecoc.import_state(doc)
    assert _state(ecoc) == before


def test_a_bad_column_leaves_every_column_unchanged() -> None:
    ecoc, _ = _trained()
    columns = list(ecoc.columns_)
    before = _state(ecoc)
    doc = ecoc.export_state()
    bad = copy.deepcopy(doc)
    bad["children"]["column:5"]["counters"]["trials"] = -1
    with pytest.raises(InvalidState):
        ecoc.import_state(bad)
    assert ecoc.columns_ == columns and _state(ecoc) == before
    for name in ("missing", "extra"):
        bad = copy.deepcopy(doc)
        if name == "missing":
            del bad["children"]["column:0"]
        else:
            bad["children"]["column:7"] = bad["children"]["column:0"]
        with pytest.raises(InvalidState, match="children"):
            ecoc.import_state(bad)
        assert _state(ecoc) == before


# -- the common contract, run here until ecoc joins the shared suite ------------------------


def test_clone_determinism_and_snapshot() -> None:
    ecoc, rest = _trained({"learner": {"kind": "perceptron"}, "decoding": "loss"})
    clone = ecoc.clone()
    assert clone.spec() == ecoc.spec()
    assert clone.counters() == {"trials": 0, "mistakes": 0, "updates": 0, "version": 0}
    again, _ = _trained({"learner": {"kind": "perceptron"}, "decoding": "loss"})
    assert _state(again) == _state(ecoc)

    snap = ecoc.snapshot()
    held_out = [x for x, _ in rest]
    predictions = [ecoc.predict(x) for x in held_out]
    assert [snap.predict(x) for x in held_out] == predictions
    for x in held_out:
        np.testing.assert_array_equal(snap.scores(x), ecoc.scores(x))
    with pytest.raises(ValueError):
        snap.weights[0, 0] = 1.0
    with pytest.raises(InvalidInstance):
        snap.scores({ecoc.n_features: 1.0})
    for x, y in rest:
        ecoc.learn(x, y)
    assert [snap.predict(x) for x in held_out] == predictions


def test_weights_stack_the_columns() -> None:
    ecoc, _ = _trained()
    w = ecoc.weights()
    assert w.shape == (ecoc.n_features, 7)
    for j, col in enumerate(ecoc.columns_):
        np.testing.assert_array_equal(w[:, j], col.weights())  # type: ignore[attr-defined]
