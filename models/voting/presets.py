"""VR-Combine: S4's headline configuration as one kind (Mesterharm & Hsu, §VII)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from models.core.hypothesis import Label
from models.core.params import MAX_SIZE, Bool, Integer, InvalidParameter, Labels, Real, RealArray
from models.voting.vcombine import VCombine

__all__ = ["ALPHAS", "PS", "VRCombine", "basic_algorithms", "vr_combine_learners"]

#: The 15 Balanced Winnow multipliers (a reading of the paper's range, 1.01 to 1.6, see
#: docs/readings.rst) and the 15 ALMA norms.
ALPHAS = (1.01, 1.02, 1.03, 1.05, 1.10, 1.15, 1.20, 1.25, 1.30, 1.35, 1.40, 1.45, 1.50, 1.55, 1.60)
PS = (2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 6.5, 7.0, 7.5, 8.0, 8.5, 9.0)


def basic_algorithms(
    alphas: Sequence[float] = ALPHAS,
    ps: Sequence[float] = PS,
    perceptron: bool = True,
    alma_C: float | None = None,
    balanced_init: Sequence[float] | None = None,
) -> list[dict[str, Any]]:
    """S4's basic sub-expert algorithms, in the order that breaks ties between members:
    Balanced Winnow by ascending alpha, the Perceptron, ALMA by ascending p.

    The paper gives neither ALMA's learning-rate scale nor Balanced Winnow's initial
    weights (see docs/readings.rst): ``alma_C`` sets the first and ``balanced_init`` the
    second as (w+, w-); None keeps the learner's own default (C = sqrt 2, w+ = w- = 1).
    """
    alma = {} if alma_C is None else {"C": float(alma_C)}
    start = (
        {}
        if balanced_init is None
        else {"init_pos": float(balanced_init[0]), "init_neg": float(balanced_init[1])}
    )
    out = [
        {"kind": "subexpert", "learner": {"kind": "balanced-winnow", "alpha": float(a), **start}}
        for a in sorted(alphas)
    ]
    if perceptron:
        out.append({"kind": "subexpert", "learner": {"kind": "perceptron"}})
    out += [
        {"kind": "subexpert", "learner": {"kind": "alma", "p": float(p), **alma}}
        for p in sorted(ps)
    ]
    return out


def vr_combine_learners(
    basics: Sequence[dict[str, Any]], size: int = 100, max_updates: int = 5
) -> list[dict[str, Any]]:
    """The recycled versions of ``basics``, then their averaged-recycled versions."""
    recycled = [
        {"kind": "recycling", "size": size, "max_updates": max_updates, "learner": b}
        for b in basics
    ]
    return recycled + [{"kind": "averaging", "learner": r} for r in recycled]


class VRCombine(VCombine):
    """VR-Combine: V-Combine over recycled (R-B) and averaged-recycled (AR-B) learners.

    S4's configuration: 15 Sub-expert Balanced Winnow (alpha from 1.01 to 1.6), the
    Sub-expert Perceptron and 15 Sub-expert ALMA (p from 2 to 9), each recycled over the
    last ``size`` = 100 instances with at most ``max_updates`` = 5 updates per instance, and
    each also averaged: 62 learners, voted with h = 20, r = 100, W = 100. Every one of these
    choices can be overridden. An AR-B member shares its R-B member, so each recycled learner
    is trained once.

    Parameters
    ----------
    alphas, ps, perceptron, alma_C, balanced_init
        Which basic algorithms (see :func:`basic_algorithms`).
    size, max_updates
        Instance recycling's store size s and update cap u.
    h, r, window, restart_wait, accuracy, vote_normalize, select, beta, wm_update, restarts
        The voting parameters of V-Combine.
    signs, ties
        What V-Combine serves (see :class:`~models.voting.vcombine.VCombine`).
    labels, n_experts
        Supplied by the model.
    """

    kind = "vr-combine"
    _parameter_constraints = {
        **{k: v for k, v in VCombine._parameter_constraints.items() if k != "learners"},
        "alphas": RealArray(low=1.0, optional=False),
        "ps": RealArray(low=2.0, optional=False),
        "perceptron": Bool(),
        "alma_C": Real(0.0, low_open=True, optional=True),
        "balanced_init": RealArray(low=0.0, optional=True),
        "size": Integer(1, 100_000),
        "max_updates": Integer(0, 10_000),
        "labels": Labels(),
        "n_features": Integer(1, MAX_SIZE, optional=True),
        "n_experts": Integer(1, MAX_SIZE, optional=True),
    }

    def __init__(
        self,
        alphas: Sequence[float] = ALPHAS,
        ps: Sequence[float] = PS,
        perceptron: bool = True,
        alma_C: float | None = None,
        balanced_init: Sequence[float] | None = None,
        size: int = 100,
        max_updates: int = 5,
        h: int = 20,
        r: int = 100,
        window: int = 100,
        restart_wait: int = 100,
        accuracy: str = "buffer+online",
        vote_normalize: str = "none",
        select: str = "fewest-mistakes",
        beta: float = 0.5,
        wm_update: str = "every_trial",
        restarts: bool = True,
        signs: str = "signed",
        ties: str = "first",
        labels: Sequence[Label] = (1, -1),
        n_features: int | None = None,
        n_experts: int | None = None,
    ) -> None:
        self.alphas = alphas
        self.ps = ps
        self.perceptron = perceptron
        self.alma_C = alma_C
        self.balanced_init = balanced_init
        self.size = size
        self.max_updates = max_updates
        super().__init__(
            [],
            h=h,
            r=r,
            window=window,
            restart_wait=restart_wait,
            accuracy=accuracy,
            vote_normalize=vote_normalize,
            select=select,
            beta=beta,
            wm_update=wm_update,
            restarts=restarts,
            signs=signs,
            ties=ties,
            labels=labels,
            n_features=n_features,
            n_experts=n_experts,
        )

    @classmethod
    def input_kind_for(cls, params: Any) -> str:
        return "experts"

    def _check_params(self) -> None:
        self.alphas_ = [float(a) for a in self.alphas]
        self.ps_ = [float(p) for p in self.ps]
        if not (self.alphas_ or self.ps_ or self.perceptron):
            raise InvalidParameter("alphas", self.alphas_, "at least one basic algorithm")
        if any(a <= 1.0 for a in self.alphas_) or any(p > 64.0 for p in self.ps_):
            raise InvalidParameter(
                "alphas" if any(a <= 1.0 for a in self.alphas_) else "ps",
                self.alphas_ if any(a <= 1.0 for a in self.alphas_) else self.ps_,
                "multipliers > 1 (alphas) and norms in [2, 64] (ps)",
            )
        start = None if self.balanced_init is None else [float(w) for w in self.balanced_init]
        if start is not None and (len(start) != 2 or min(start) <= 0.0):
            raise InvalidParameter(
                "balanced_init", start, "two initial weights [w+, w-], each > 0, or null"
            )
        self.balanced_init_ = start
        super()._check_params()

    def members(self) -> list[dict[str, Any]]:
        basics = basic_algorithms(
            self.alphas_, self.ps_, self.perceptron, self.alma_C, self.balanced_init_
        )
        return vr_combine_learners(basics, self.size, self.max_updates)

    def spec_params(self) -> dict[str, Any]:
        return {
            **self.get_params(),
            "alphas": self.alphas_,
            "ps": self.ps_,
            "balanced_init": self.balanced_init_,
        }
