"""The fusion quality benchmark runs end to end against the service it starts: every figure
printed, the headline last. Asserted: the format, and only what must hold whatever the
figures (errors are rates, the oracle switch is no worse than the best single expert, the
broken expert is broken on the last half, the blind start names its label-free rule)."""

import re

from _run import run_bench

SETS = {"digits": 150, "breast_cancer": 200, "synthetic": 300}  # trials with --quick
MODES = ("one_by_one", "pending_100")
SPECS = (
    "weighted-majority",
    "committee",
    "vr-combine",
    "vr-combine-robust",
    "per-label",
    "fusion",
)
RIVER = ("river_softmax", "river_bandit")
EXPERTS = ("naive-bayes", "logistic", "knn", "tree", "forest", "random", "svc")
LINE = re.compile(r"([a-z_0-9.-]+): (\S+)(?: \((.+)\))?")
DROP = re.compile(r"\d+\.\d|>\d+|n/a")
HEADLINE = re.compile(r"(worst: [a-z_]+\.[a-z_0-9]+; )(information|target <= 1\.05: (met|MISSED))")


def expected(name: str) -> list[str]:
    errors = ("error", "error_last_half")
    return [
        "trials",
        *(f"expert.{e}.{what}" for e in EXPERTS for what in errors),
        "best_single.error",
        "best_single.mistakes_following_broken",
        "fixed_average.error",
        "oracle_switch_500.error",
        *(
            f"{mode}.{who}.{what}"
            for mode in MODES
            for who, whats in [
                ("blind_start", ("error",)),
                *(
                    (s, (*errors, "trials_to_drop_broken", "mistakes_following_broken"))
                    for s in SPECS
                ),
                *((r, errors) for r in RIVER),
            ]
            for what in whats
        ),
    ]


def test_a_quick_run_prints_every_figure_and_the_headline_last() -> None:
    lines = run_bench("fusion.py", "--quick").splitlines()
    got = [LINE.fullmatch(ln) for ln in lines]
    assert all(got), lines
    names = [m[1] for m in got if m]
    assert names == [
        *(f"{s}.{n}" for s in SETS for n in expected(s)),
        "fusion_vs_oracle_switch",
        "fusion_vs_blind_start",
        "fusion_vs_best_single",
    ]
    value = {m[1]: m[2] for m in got if m}
    note = {m[1]: m[3] for m in got if m}

    for name, v in value.items():
        if name.endswith((".error", ".error_last_half")):
            assert 0.0 <= float(v) <= 1.0, name
    for s, trials in SETS.items():
        assert int(value[f"{s}.trials"]) == trials
        best = float(value[f"{s}.best_single.error"])
        assert note[f"{s}.best_single.error"] in EXPERTS
        # its mistakes on the broken expert's label are among its mistakes
        assert 0 <= int(value[f"{s}.best_single.mistakes_following_broken"]) <= best * trials
        # in each window the oracle follows an expert at least as good there as any
        assert float(value[f"{s}.oracle_switch_500.error"]) <= best
        # the SVC's scores move to the next class half-way: mostly wrong from there on
        assert float(value[f"{s}.expert.svc.error_last_half"]) >= 0.5
        assert float(value[f"{s}.expert.svc.error_last_half"]) > float(
            value[f"{s}.expert.svc.error"]
        )
        for mode in MODES:
            # the blind trials by a label-free rule, then the best single expert
            rule = note[f"{s}.{mode}.blind_start.error"]
            n = 1 if mode == "one_by_one" else 100
            assert rule in {f"{r} on the first {n}" for r in ("mean", "median", "vote")}, rule
            for spec in SPECS:
                drop = value[f"{s}.{mode}.{spec}.trials_to_drop_broken"]
                assert DROP.fullmatch(drop), (s, mode, spec, drop)
                following = int(value[f"{s}.{mode}.{spec}.mistakes_following_broken"])
                assert 0 <= following <= trials - trials // 2
            # Weighted Majority's weights are shown by the statistics
            assert value[f"{s}.{mode}.weighted-majority.trials_to_drop_broken"] != "n/a"

    for name in ("fusion_vs_oracle_switch", "fusion_vs_blind_start", "fusion_vs_best_single"):
        assert float(value[name]) > 0
        assert HEADLINE.fullmatch(note[name]), note[name]
    assert note["fusion_vs_oracle_switch"].endswith("information")
    assert note["fusion_vs_blind_start"].endswith("information")
    assert "target <= 1.05" in note["fusion_vs_best_single"]
    # the oracle is no worse than the best single expert: the ratio to it is no lower
    assert float(value["fusion_vs_oracle_switch"]) >= float(value["fusion_vs_best_single"])
