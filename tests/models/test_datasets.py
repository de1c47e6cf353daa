"""The majority-problem generator (Mesterharm & Hsu, §VII): target, margin, noise and seeds;
and the sparse stream."""

from fractions import Fraction

import numpy as np
import pytest

from models.core.params import InvalidParameter
from models.inputs.datasets import MajorityProblem, majority_target, sparse_disjunction_stream


def test_target_weights_and_margin_match_s4():
    u, delta = majority_target(MajorityProblem(n=20, r=10, k=5))
    assert u[:10] == pytest.approx([1 / 12] * 10)
    assert u[10:20] == pytest.approx([0.0] * 10)
    assert u[20:] == pytest.approx([4 / 60, 3 / 60, 2 / 60, 1 / 60, 0.0])
    assert u.sum() == pytest.approx(1.0)
    assert delta == pytest.approx(1 / 60)


def test_clean_labels_are_the_target_arg_max_with_margin_delta_exactly():
    problem = MajorityProblem(n=20, r=10, k=5)
    a = Fraction(1, 12)
    u = [a] * 10 + [Fraction(0)] * 10 + [Fraction(4 - c, 60) for c in range(5)]
    xs, _, clean = problem.sample(2000, np.random.default_rng(3))
    for x, y in zip(xs, clean, strict=True):
        votes = [Fraction(0)] * 5
        for e, c, v in zip(x.expert.tolist(), x.cls.tolist(), x.value.tolist(), strict=True):
            votes[c] += u[e] * Fraction(v)
        assert max(range(5), key=lambda j: (votes[j], -j)) == y
        assert all(votes[y] - votes[j] >= Fraction(1, 60) for j in range(5) if j != y)


def test_noise_rate_and_noisy_labels_differ_from_clean():
    problem = MajorityProblem(noise=0.2)
    _, ys, clean = problem.sample(20_000, np.random.default_rng(5))
    flipped = ys != clean
    assert abs(flipped.mean() - 0.2) < 0.015
    assert ((ys >= 0) & (ys < 5)).all()
    # a noisy label is uniform over the other k - 1 labels
    shifts = ((ys - clean) % 5)[flipped]
    assert set(np.unique(shifts).tolist()) == {1, 2, 3, 4}


def test_generator_is_seeded():
    problem = MajorityProblem(noise=0.1)
    a = problem.sample(50, np.random.default_rng(11))
    b = problem.sample(50, np.random.default_rng(11))
    assert all((x.cls == z.cls).all() for x, z in zip(a[0], b[0], strict=True))
    assert (a[1] == b[1]).all()
    c = problem.sample(50, np.random.default_rng(12))
    assert not (a[1] == c[1]).all()


def test_instances_hold_n_plus_k_one_hot_sub_experts():
    problem = MajorityProblem(n=20, r=10, k=5)
    xs, _, _ = problem.sample(10, np.random.default_rng(0))
    for x in xs:
        assert x.expert.tolist() == list(range(25))
        assert x.cls[20:].tolist() == [0, 1, 2, 3, 4]
        assert (x.value == 1.0).all()


def test_sparse_stream_shape_noise_and_constant_attribute():
    batch, y = sparse_disjunction_stream(4000, n_features=1000, n_active=20, noise=0.0, seed=1)
    assert len(batch) == 4000
    assert (np.diff(batch.indptr) == 20).all()
    assert (batch.indices.reshape(4000, 20)[:, -1] == 999).all()
    assert set(np.unique(y).tolist()) == {-1, 1}
    _, noisy = sparse_disjunction_stream(4000, n_features=1000, noise=0.1, seed=1)
    assert abs((noisy != y).mean() - 0.1) < 0.02


def test_order_ties_go_to_the_first_relevant_sub_expert_voting_a_tied_class():
    votes = np.array(
        [
            [1, 1, 2, 2, 0, 0, 3, 3, 4, 4] + [0] * 10,  # 5-way tie: sub-expert 0 votes 1
            [2, 1, 1, 2, 0, 0, 3, 3, 4, 4] + [0] * 10,  # sub-expert 0 votes 2
            [3, 3, 3, 1, 1, 1, 0, 0, 2, 2] + [1] * 10,  # 1 and 3 tie; the first votes 3
            [4, 2, 2, 2, 0, 1, 3, 4, 0, 1] + [2] * 10,  # no tie: 2 wins
        ]
    )
    assert MajorityProblem().clean_labels(votes).tolist() == [0, 0, 1, 2]
    assert MajorityProblem(ties="order").clean_labels(votes).tolist() == [1, 2, 3, 2]


def test_order_ties_change_only_tied_labels():
    votes = MajorityProblem().sample_votes(5000, np.random.default_rng(1))
    smallest = MajorityProblem().clean_labels(votes)
    order = MajorityProblem(ties="order").clean_labels(votes)
    counts = np.stack([(votes[:, :10] == c).sum(axis=1) for c in range(5)], axis=1)
    tied = (counts == counts.max(axis=1, keepdims=True)).sum(axis=1) > 1
    assert (smallest[~tied] == order[~tied]).all()
    assert (smallest[tied] != order[tied]).any()
    assert (counts[np.arange(5000), order] == counts.max(axis=1)).all()


def test_tie_rule_is_validated():
    with pytest.raises(InvalidParameter, match="ties='largest' is invalid"):
        MajorityProblem(ties="largest")
