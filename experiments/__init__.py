"""S4's experiments on the majority problem: Table I and Figure 5 (Mesterharm & Hsu, §VII).

``committee experiment table1`` runs the paper's protocol (see docs/table1.rst): for every
noise level and run, the paper's 31 basic algorithms (each inside an averaging wrapper, so
one learner gives both B and A-B) and VR-Combine (a v-combine over their 31 recycled and 31
averaged-recycled versions) learn the same stream; then every frozen predictor is scored
on fresh noisy test instances. ``committee experiment curves`` draws Figure 5, the on-line
mistakes.

The commands are in :mod:`experiments.cli`, a run in :mod:`experiments.runs`, the bulk
scoring of test instances in :mod:`experiments.scoring` and Table I's statistics in
:mod:`experiments.table` (all re-exported here). The package depends on :mod:`models` only.
"""

from __future__ import annotations

from experiments.cli import add_parser, curves, table1
from experiments.runs import (
    ALMA_PS,
    BALANCED_ALPHAS,
    FAMILIES,
    Job,
    RunFailed,
    RunResult,
    algorithm_name,
    basic_algorithms,
    job_vr_combine_spec,
    member_names,
    run_job,
    run_jobs,
    vr_combine_spec,
)
from experiments.scoring import (
    TestVotes,
    check_predictions,
    hypothesis_scores,
    predict_classes,
)
from experiments.table import (
    PAPER_TABLE_I,
    PAPER_VR_MISTAKES_P0,
    PaperRow,
    best_member,
    format_table,
    mean_half_width,
    summarise,
    t_quantile,
    t_quantile_table,
)

__all__ = [
    "ALMA_PS",
    "BALANCED_ALPHAS",
    "FAMILIES",
    "PAPER_TABLE_I",
    "PAPER_VR_MISTAKES_P0",
    "Job",
    "PaperRow",
    "RunFailed",
    "RunResult",
    "TestVotes",
    "add_parser",
    "algorithm_name",
    "basic_algorithms",
    "best_member",
    "check_predictions",
    "curves",
    "format_table",
    "hypothesis_scores",
    "job_vr_combine_spec",
    "mean_half_width",
    "member_names",
    "predict_classes",
    "run_job",
    "run_jobs",
    "summarise",
    "t_quantile",
    "t_quantile_table",
    "table1",
    "vr_combine_spec",
]
