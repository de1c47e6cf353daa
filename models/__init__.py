"""Winnow-family on-line learners, their instances and state documents (no I/O).

The package is in layers, each importing only those below it (an import-linter contract,
``[tool.importlinter]`` in ``pyproject.toml``): ``kernels`` (the compiled loops), ``core``
(the learner contract, hypotheses, parameters, instances, state documents, the kind table
and nested learners), ``learners`` and ``inputs``, ``wrappers``, ``ensembles``, ``voting``,
then ``registry`` (every kind), ``budget`` and ``warm``. The public names are re-exported
here.

Compiled loops are cached on disk by numba, in the directory :func:`models.warm.place_cache`
chooses where the kernels are warmed; importing this package chooses nothing.
"""

from __future__ import annotations

from models.core.forms import BinaryLearner, MulticlassLearner
from models.core.hypothesis import Hypothesis, Label
from models.core.instance import (
    AttributeBatch,
    Attributes,
    Experts,
    InvalidInstance,
)
from models.core.learner import Learner, Outcome, UnknownLabel, UpdateRefused
from models.core.params import InvalidParameter
from models.core.state import InvalidState
from models.drift import ADWIN, DETECTORS, DriftDetector, PageHinkley
from models.inputs.space import InputSpace
from models.registry import (
    CONTEXT_PARAMS,
    KINDS,
    build,
    describe,
    from_state,
    kind_of,
)

__all__ = [
    "ADWIN",
    "CONTEXT_PARAMS",
    "DETECTORS",
    "KINDS",
    "AttributeBatch",
    "Attributes",
    "BinaryLearner",
    "DriftDetector",
    "Experts",
    "Hypothesis",
    "InputSpace",
    "InvalidInstance",
    "InvalidParameter",
    "InvalidState",
    "Label",
    "Learner",
    "MulticlassLearner",
    "Outcome",
    "PageHinkley",
    "UnknownLabel",
    "UpdateRefused",
    "build",
    "describe",
    "from_state",
    "kind_of",
]
