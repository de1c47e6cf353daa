"""Fusion: the recommended learner for live fusion of deployed classifiers (a preset)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from models.core.hypothesis import Label
from models.learners.weighted_majority import WeightedMajority

__all__ = ["FUSION_INPUT", "Fusion"]

#: The input options that go with it: every classifier's probabilities, and the average
#: of every subset of two or three of them by score and by rank, each a sub-expert.
FUSION_INPUT = {"normalize": "sum-to-one", "combinations": {"size": 3, "by": ["score", "rank"]}}


class Fusion(WeightedMajority):
    """Weighted Majority with a Brier term and a weight floor, over classifiers and subsets.

    Each sub-expert votes for its top label; Weighted Majority (Littlestone & Warmuth 1994)
    predicts the label with the largest total weight and multiplies the weight of every
    sub-expert by ``beta`` to the power of its loss, on every trial: 1 if its top label
    was wrong, plus half the Brier score of its votes as probabilities (``brier = 1``).
    Early in a stream the classifiers have made as few mistakes as each other; the Brier
    term gives the weight sooner to the one whose probabilities were nearer the truth.
    The weight floor (WML, ``gamma = weight_floor``) keeps a classifier that has been
    wrong for a while within reach, so it is regained within a few trials once it is
    right again; a classifier that breaks loses its weight geometrically, at least one
    halving per wrong label. Over the input options of
    :data:`FUSION_INPUT` the pool holds every classifier and the average of every subset
    of two or three of them, so the fusion can follow a subset that beats its best member
    (combinatorial fusion) as well as the best member itself. With v sub-experts of which
    the best has loss L (its mistakes plus its summed half Brier scores),
    M <= (ln v + L ln(1/beta)) / ln(2/(1+beta)); the tracking bound per segment is in
    docs/tracking.rst, with L in place of its mistakes.

    Every choice is a parameter of :class:`WeightedMajority` and can be overridden, and the
    input options are the model's own (docs/fusion.rst says which spec suits which use).

    Parameters
    ----------
    n_experts
        Number of sub-experts (supplied by the model).
    labels
        The class labels (supplied by the model).
    beta, update, weight_floor, fixed_share, brier
        As for :class:`WeightedMajority`; here 0.5, ``"every_trial"``, 0.01, 0 and 1.

    Examples
    --------
    >>> f = Fusion(n_experts=3, labels=["cat", "dog"])
    >>> f.learn([[1, 0], [0, 1], [0.25, 0.75]], "cat")
    Outcome(mistake=True, updated=True)
    >>> f.weights().round(4).tolist()
    [1.0, 0.25, 0.3386]
    """

    kind = "fusion"

    def __init__(
        self,
        n_experts: int,
        labels: Sequence[Label],
        beta: float = 0.5,
        update: str = "every_trial",
        weight_floor: float = 0.01,
        fixed_share: float = 0.0,
        brier: float = 1.0,
    ) -> None:
        super().__init__(
            n_experts,
            labels,
            beta=beta,
            update=update,
            weight_floor=weight_floor,
            fixed_share=fixed_share,
            brier=brier,
        )

    def spec_params(self) -> dict[str, Any]:
        return self.get_params()  # every option, those at 0 included: its defaults are not 0
