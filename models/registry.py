"""Every learner kind, registered: build any of them from a JSON-able spec, list them all.

A spec is ``{"kind": "balanced-winnow", "alpha": 1.2, ...}``; :func:`build` checks every
parameter (see :mod:`models.core.kinds`). Importing this module imports every kind, so the
table is complete, in the order below.
"""

from __future__ import annotations

from models.core.kinds import CONTEXT_PARAMS, KINDS, build, describe, from_state, kind_of
from models.ensembles.bagging import OnlineBagging, OnlineBoosting
from models.ensembles.ecoc import ECOC
from models.learners.alma import ALMA
from models.learners.balanced import BalancedWinnow
from models.learners.committee import Committee
from models.learners.fusion import Fusion
from models.learners.multiclass_winnow import MulticlassWinnow
from models.learners.perceptron import Perceptron
from models.learners.weighted_majority import WeightedMajority
from models.learners.winnow import Winnow
from models.voting.presets import VRCombine
from models.voting.vcombine import VCombine
from models.wrappers.averaging import Averaging
from models.wrappers.recycling import Recycling
from models.wrappers.subexpert import SubExpert

__all__ = ["CONTEXT_PARAMS", "KINDS", "ORDER", "build", "describe", "from_state", "kind_of"]

#: Every kind class, in the order :func:`describe` lists them.
ORDER = (
    Winnow,
    BalancedWinnow,
    Perceptron,
    ALMA,
    Committee,
    MulticlassWinnow,
    WeightedMajority,
    SubExpert,
    Recycling,
    Averaging,
    VCombine,
    ECOC,
    OnlineBagging,
    OnlineBoosting,
    VRCombine,
    Fusion,
)
for _cls in ORDER:
    KINDS[_cls.kind] = KINDS.pop(_cls.kind)
