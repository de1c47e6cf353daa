"""Sub-expert conversion (Mesterharm & Hsu, §III): a binary threshold-0 learner made multi-class.

Refusals: checked first, by the binary learner's own update (only Balanced Winnow with an
alpha of 2**400 or more can refuse at threshold 0); a checkpoint is the binary learner's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from models.core.forms import BinaryLearner, MulticlassLearner
from models.core.hypothesis import Label
from models.core.instance import Experts
from models.core.kinds import kind_of
from models.core.learner import Learner, Spec, UpdateRefused
from models.core.nested import HasInner, build_inner, inner_spec, nested_error
from models.core.params import MAX_SIZE, Integer, InvalidParameter, Labels, Options
from models.kernels.dispatch import subexpert_learn, subexpert_predict, subexpert_scores
from models.kernels.families import subexpert_family

__all__ = ["SubExpert"]


class SubExpert(HasInner, MulticlassLearner):
    """Turn a binary linear-threshold learner L into a multi-class sub-expert learner.

    L keeps one weight per sub-expert. Class j scores s_j = w.x^j and the first arg-max is
    predicted. To learn from true class y, build z = x^y - x^c and give (z, +1) to L's
    update rule, where c is the predicted class (``subexpert_z="predicted"``: updates only
    on mistakes, and L makes exactly the mistakes of the multi-class learner) or the
    runner-up class (``"runner_up"``: on a correct prediction L sees the margin s_y - s_c,
    which margin learners such as ALMA use). A mistake always updates. z has non-zeros only
    where x^y or x^c do, so a trial costs O(active sub-experts).

    With L = Balanced Winnow this is Mesterharm & Hsu's Sub-expert Balanced Winnow; with the
    Perceptron, the multi-class Perceptron; with ALMA, Sub-expert ALMA.

    Parameters
    ----------
    learner
        Spec (or instance) of the binary learner: balanced-winnow (theta 0), perceptron or
        alma. Its ``n_features`` is set to ``n_experts``.
    n_experts
        Number of sub-experts.
    labels
        The class labels, in class order.
    subexpert_z
        ``"predicted"``, ``"runner_up"``, or None for the learner's own preference
        (runner-up for margin learners, predicted otherwise).

    Examples
    --------
    >>> se = SubExpert({"kind": "perceptron"}, n_experts=3, labels=[1, 2])
    >>> se.learn([[1, 0], [0, 1], [0.5, 0.5]], 2)
    Outcome(mistake=True, updated=True)
    >>> se.weights().tolist()
    [-1.0, 1.0, 0.0]
    """

    kind = "subexpert"
    learner_: BinaryLearner
    _parameter_constraints = {
        "learner": Spec(),
        "n_experts": Integer(1, MAX_SIZE),
        "labels": Labels(),
        "subexpert_z": Options(("predicted", "runner_up"), optional=True),
    }

    def __init__(
        self,
        learner: Mapping[str, Any] | Learner,
        n_experts: int,
        labels: Sequence[Label],
        subexpert_z: str | None = None,
    ) -> None:
        self.learner = learner
        self.n_experts = n_experts
        self.labels = labels  # type: ignore[assignment]
        self.subexpert_z = subexpert_z
        self._initialise()

    def _check_params(self) -> None:
        spec = inner_spec(self.learner)
        expected = "a binary threshold-0 learner: balanced-winnow (theta 0), perceptron or alma"
        try:
            cls = kind_of(spec)
        except InvalidParameter as exc:
            raise nested_error(exc) from None
        if not (issubclass(cls, BinaryLearner) and cls.convertible):
            raise InvalidParameter("learner", spec, expected)
        inner = build_inner(spec, labels=None, size=self.n_experts)
        if not isinstance(inner, BinaryLearner) or inner.effective_threshold != 0.0:
            raise InvalidParameter("learner", spec, expected)
        self.learner_ = inner
        self.value_range = inner.value_range
        self._k = len(self.labels)
        mode = self.subexpert_z or ("runner_up" if inner.margin_based else "predicted")
        self._runner_up = mode == "runner_up"
        self._offset = subexpert_family(0, self._runner_up)  # the family id is base + offset

    def spec_params(self) -> dict[str, Any]:
        return {**self.get_params(), "learner": self.learner_}

    def _reset_state(self) -> None:
        self.learner_.reset()

    def _array_shapes(self) -> dict[str, tuple[int, ...]]:
        return {}

    def _take(self, old: Learner, at: np.ndarray) -> None:
        """The binary learner grows as its kind does (a sub-expert is one of its inputs)."""
        assert isinstance(old, SubExpert)
        self.learner_._adopt(old.learner_, at)

    def kernel_state(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        inner = self.learner_.kernel_state()
        assert inner is not None  # every convertible learner has one
        fam, W, S, P = inner
        return fam + self._offset, W, S, P

    def _scores(self, x: Experts) -> np.ndarray:
        fam, W, S, P = self.kernel_state()
        return np.asarray(
            subexpert_scores(fam, W, S, P, x.expert, x.cls, x.value, len(self.labels))
        )

    def _predict(self, x: Experts) -> int:
        fam, W, S, P = self.kernel_state()
        wf, _ = self._scratch(0)
        return int(subexpert_predict(fam, W, S, P, x.expert, x.cls, x.value, wf[: self._k]))

    def _learn(self, x: Experts, c: int) -> tuple[int, bool]:
        fam, W, S, P = self.kernel_state()
        k = len(self.labels)
        wf, wi = self._scratch(len(x))
        pred, status = subexpert_learn(fam, W, S, P, x.expert, x.cls, x.value, k, c, wf, wi)
        if status == 2:
            raise UpdateRefused(f"{self.learner_.kind} refused an update that would overflow", pred)
        return int(pred), status == 1

    def _save_at(self, idx: np.ndarray) -> Any:
        return self.learner_._save_at(idx)

    def _restore_at(self, saved: Any) -> None:
        self.learner_._restore_at(saved)

    def weights(self) -> np.ndarray:
        return self.learner_.weights()
