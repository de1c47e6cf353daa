"""S4's experiments: the Table I and Figure 5 commands, run as real processes, and the
vectorised evaluator against the hypotheses' own predictions."""

import json
import subprocess
import sys

import numpy as np
import pytest

from experiments import (
    PAPER_TABLE_I,
    TestVotes,
    basic_algorithms,
    hypothesis_scores,
    job_vr_combine_spec,
    member_names,
    predict_classes,
    t_quantile,
    t_quantile_table,
    vr_combine_spec,
)
from models.core.hypothesis import Hypothesis, InstanceCheck, LinearMaxHypothesis
from models.core.instance import Experts
from models.inputs.datasets import MajorityProblem
from models.registry import build
from models.voting.vcombine import VCombine, VotingHypothesis


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", "experiment", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=timeout,
    )


# -- the algorithm lists -------------------------------------------------------------------------


def test_the_31_basic_algorithms_in_a11_order():
    names = [name for name, _ in basic_algorithms()]
    assert len(names) == len(set(names)) == 31
    assert names[:4] == ["Balanced(1.01)", "Balanced(1.02)", "Balanced(1.03)", "Balanced(1.05)"]
    assert names[14:17] == ["Balanced(1.6)", "Perceptron", "ALMA(2)"]
    assert names[-1] == "ALMA(9)"
    members = member_names()
    assert len(members) == 124 and members[31] == "A-Balanced(1.01)"
    assert members[62] == "R-Balanced(1.01)" and members[93] == "AR-Balanced(1.01)"
    for row in PAPER_TABLE_I.values():  # the paper's winners are among the members
        for name, _, _ in (row.best_ar, row.best_a, row.best_b):
            assert name in members


def test_vr_combine_spec_builds_the_62_members_with_the_papers_parameters():
    vr = build(vr_combine_spec(), labels=list(range(5)), size=25)
    assert isinstance(vr, VCombine)
    assert (vr.h, vr.r, vr.window, vr.restart_wait) == (20, 100, 100, 100)
    kinds = [m.kind for m in vr.learners_]
    assert kinds == ["recycling"] * 31 + ["averaging"] * 31
    assert all((m.size, m.max_updates) == (100, 5) for m in vr.learners_[:31])  # type: ignore[attr-defined]
    assert vr.members()[31]["learner"] == vr.members()[0]  # AR-B averages R-B


def _basics(vr: VCombine) -> list[dict[str, object]]:
    return [m["learner"]["learner"] for m in vr.members()[:31]]  # type: ignore[index]


def test_the_experiments_readings_reach_every_member_and_only_at_their_noise():
    from experiments.cli import _jobs, _parser

    args = _parser().parse_args(["table1", "--runs", "1"])
    jobs = {job.noise: job for job in _jobs(args, [0.0, 0.05], curves=False)}
    for noise, u in ((0.0, 50), (0.05, 5)):
        vr = build(job_vr_combine_spec(jobs[noise]), labels=list(range(5)), size=25)
        assert isinstance(vr, VCombine)
        assert all(m.max_updates == u for m in vr.learners_[:31])  # type: ignore[attr-defined]
        basics = _basics(vr)
        balanced = [b for b in basics if b["kind"] == "balanced-winnow"]
        alma = [b for b in basics if b["kind"] == "alma"]
        assert len(balanced) == 15 and len(alma) == 15
        assert all((b["init_pos"], b["init_neg"]) == (2.0, 1.0) for b in balanced)
        assert all(a["C"] == 0.3 for a in alma)
    # each set back to the learners' own defaults
    plain = _parser().parse_args(
        ["table1", "--alma-c", "default", "--balanced-init", "1:1", "--noise-free-updates", "5"]
    )
    job = _jobs(plain, [0.0], curves=False)[0]
    vr = build(job_vr_combine_spec(job), labels=list(range(5)), size=25)
    assert all(m.max_updates == 5 for m in vr.learners_[:31])  # type: ignore[attr-defined]
    fresh = build(vr_combine_spec(), labels=list(range(5)), size=25)
    assert all(a.get("C") is None for a in _basics(vr) if a["kind"] == "alma")
    assert [
        (b["init_pos"], b["init_neg"]) for b in _basics(vr) if b["kind"] == "balanced-winnow"
    ] == [(1.0, 1.0)] * 15
    assert _basics(fresh)[0].get("init_pos") is None  # the preset's own default: Figure 1's


@pytest.mark.parametrize(
    ("dof", "expected"),
    # published t_{0.975} values
    [(1, 12.7062), (2, 4.3027), (10, 2.2281), (19, 2.0930), (30, 2.0423), (31, 2.0395),
     (40, 2.0211), (60, 2.0003), (120, 1.9799), (10_000, 1.9602)],
)  # fmt: skip
def test_t_quantiles(dof, expected):
    assert t_quantile_table(dof) == pytest.approx(expected, abs=1e-4)
    assert t_quantile(dof) == pytest.approx(expected, abs=1e-4)


# -- the vectorised evaluator --------------------------------------------------------------------


def _weights(rng: np.random.Generator, kind: str, n: int) -> np.ndarray:
    if kind == "integer":  # small integers: exact ties are frequent
        return rng.integers(-2, 3, size=n).astype(float)
    if kind == "winnow":  # products of alpha powers, as Balanced Winnow's weights are
        return 1.3 ** rng.integers(-6, 7, size=n) - 1.3 ** rng.integers(-6, 7, size=n)
    return rng.normal(size=n) * 10.0 ** rng.integers(-3, 4, size=n)


@pytest.mark.parametrize("seed", range(4))
def test_vectorised_predictions_equal_predict_class(seed):
    rng = np.random.default_rng(seed)
    problem = MajorityProblem()
    n, k = problem.n_experts, problem.k
    votes = problem.sample_votes(400, rng)
    tests = TestVotes.majority(problem, votes)
    instances = [problem.instance(v) for v in votes]
    check = InstanceCheck("test", "experts", n, k, None)
    labels = tuple(range(k))
    linear = [
        LinearMaxHypothesis(_weights(rng, kind, n), labels, check, scale)
        for kind in ("integer", "winnow", "real")
        for scale in (1.0, 0.37, 3.0)
    ]
    voting = [
        VotingHypothesis(list(rng.choice(linear, size=size)), normalize, labels, check)
        for normalize in ("none", "l1", "maxabs")
        for size in (1, 4, 12)
    ]
    for h in [*linear, *voting]:
        fast = predict_classes(h, tests)
        assert fast.tolist() == [h.predict_class(x) for x in instances]
        scores = hypothesis_scores(h, tests)
        assert np.array_equal(scores, np.array([h.scores(x) for x in instances]))


def test_vectorised_scores_of_arbitrary_one_hot_instances():
    rng = np.random.default_rng(7)
    n, k = 9, 3
    votes = rng.integers(0, k, size=(200, n))
    tests = TestVotes(votes, k)
    h = LinearMaxHypothesis(
        rng.integers(-1, 2, size=n).astype(float),
        (0, 1, 2),
        InstanceCheck("test", "experts", n, k, None),
    )
    instances = [Experts(np.arange(n), v, np.ones(n)) for v in votes]
    assert predict_classes(h, tests).tolist() == [h.predict_class(x) for x in instances]


def test_unknown_hypotheses_are_refused():
    class Other(Hypothesis):
        pass

    tests = TestVotes(np.zeros((2, 3), dtype=np.int64), 2)
    with pytest.raises(TypeError, match="Other"):
        predict_classes(Other(), tests)


# -- the commands ----------------------------------------------------------------------------------


def test_table1_json_reduced_run_orders_the_families():
    noises = (0.05, 0.2)
    out = _cli(
        "table1", "--runs", "3", "--trials", "1500", "--test", "5000",
        "--noise", ",".join(map(str, noises)), "--workers", "2", "--json",
    ).stdout  # fmt: skip
    doc = json.loads(out)  # the whole of stdout is one document
    assert set(doc) == {"rows", "seconds"} and doc["seconds"] > 0
    assert [row["noise"] for row in doc["rows"]] == list(noises)
    members = member_names()
    for row in doc["rows"]:
        assert set(row) == {"noise", "vr_combine", "best_ar", "best_a", "best_b", "learners"}
        assert set(row["vr_combine"]) == {"mean", "half_width", "online_mistakes"}
        # on-line mistakes: at least the noisy trials' share, at most every trial
        assert 1500 * row["noise"] * 0.5 <= row["vr_combine"]["online_mistakes"] <= 1500
        assert list(row["learners"]) == members
        for entry in row["learners"].values():
            assert set(entry) == {"mean", "half_width"} and 0.0 <= entry["mean"] <= 1.0
        for key in ("best_ar", "best_a", "best_b"):  # each best is its learner's figure
            best = row[key]
            assert row["learners"][best["name"]] == {
                "mean": best["mean"],
                "half_width": best["half_width"],
            }
        for key, prefix in (("best_ar", "AR-"), ("best_a", "A-"), ("best_b", "")):
            entry = row[key]
            assert set(entry) == {"name", "mean", "half_width"}
            assert entry["name"] in members and entry["name"].startswith(prefix)
            assert 0.0 <= entry["mean"] <= 1.0 and entry["half_width"] >= 0.0
        p = row["noise"]
        assert abs(row["vr_combine"]["mean"] - p) <= 0.05, row
        assert row["best_ar"]["mean"] < row["best_a"]["mean"] < row["best_b"]["mean"], row


def test_table1_text_output_shows_the_papers_numbers(tmp_path):
    out = _cli(
        "table1", "--runs", "2", "--trials", "200", "--test", "500", "--noise", "0.1",
        "--workers", "1",
    ).stdout  # fmt: skip
    assert "Table I" in out and "S4 paper" in out
    assert "0.10237 ± 0.00027" in out  # the paper's VR-Combine at p = .1
    assert "on-line mistakes" in out


def test_curves_writes_a_png(tmp_path):
    from matplotlib import image  # the experiments extra

    target = tmp_path / "fig5.png"
    out = _cli(
        "curves", "--runs", "2", "--trials", "300", "--test", "1000", "--workers", "1",
        "--out", str(target),
    ).stdout  # fmt: skip
    assert str(target) in out
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = image.imread(target)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100


def test_bad_options_are_refused():
    with pytest.raises(subprocess.CalledProcessError) as err:
        _cli("table1", "--noise", "0.1,1.5", "--runs", "1")
    assert "noise rate" in err.value.stderr
    for flag, value, expected in (
        ("--alma-c", "0", "'default'"),
        ("--alma-c", "nan", "'default'"),
        ("--balanced-init", "2", "W+:W-"),
        ("--balanced-init", "2:-1", "W+:W-"),
        ("--noise-free-updates", "-1", ">= 0"),
    ):
        with pytest.raises(subprocess.CalledProcessError) as err:
            _cli("table1", flag, value, "--runs", "1")
        assert flag in err.value.stderr and expected in err.value.stderr
