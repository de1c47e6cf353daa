"""What a dashboard shows of a learner, derived from it by a worker and kept in Redis so
that statistics never load learner state: recycling's internal counts, V-Combine's
members, the sub-expert weights of fusion models and their classifiers' scorecards."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from app.service import scorecards
from app.service.live_model import LiveModel
from models.core.learner import Learner
from models.core.params import InvalidParameter
from models.registry import kind_of

__all__ = ["MAX_EXPERTS", "describe_spec", "summarize"]

MAX_EXPERTS = 256  # weights (the largest) and scorecards shown per model at most
_CONTEXT = {"kind", "learner", "learners", "labels", "n_features", "n_experts"}


def describe_spec(spec: Mapping[str, Any]) -> str:
    """A short readable name for a learner spec: ``recycling(size=100) / balanced-winnow``
    (parameters at their defaults left out)."""
    try:
        defaults = kind_of(spec).param_defaults()
    except InvalidParameter:
        defaults = {}
    params = ", ".join(
        f"{k}={v}"
        for k, v in spec.items()
        if k not in _CONTEXT and v is not None and (k not in defaults or defaults[k] != v)
    )
    name = f"{spec.get('kind')}({params})" if params else str(spec.get("kind"))
    inner = spec.get("learner")
    return f"{name} / {describe_spec(inner)}" if isinstance(inner, Mapping) else name


def _chain(learner: Learner) -> Iterator[Learner]:
    """The learner and the learners it wraps, outermost first."""
    node: Any = learner
    seen = 0
    while isinstance(node, Learner) and seen < 32:
        yield node
        node = getattr(node, "learner_", None)
        seen += 1


def _voting(learner: Learner) -> tuple[list[dict[str, Any]], str] | None:
    for node in _chain(learner):
        members = getattr(node, "learners_", None)
        mistakes = getattr(node, "learner_mistakes_", None)
        if members is None or mistakes is None:
            continue
        recent = getattr(node, "recent_mistakes_", mistakes)
        names = [describe_spec(m.spec()) for m in members]
        rows = [
            {"name": n, "mistakes": int(a), "recent_mistakes": int(b)}
            for n, a, b in zip(names, mistakes, recent, strict=True)
        ]
        best = int(getattr(node, "best_", int(np.argmin(recent))))
        return rows, names[best]
    return None


def _internal(learner: Learner) -> dict[str, int] | None:
    for node in _chain(learner):
        if hasattr(node, "internal_trials_"):
            return {
                what: int(getattr(node, f"internal_{what}_"))
                for what in ("trials", "mistakes", "updates")
            }
    return None


def _weights(m: LiveModel) -> np.ndarray | None:
    """The learner's weight of every sub-expert of a fusion model (None: it has none)."""
    if m.form != "experts":
        return None
    try:
        w = np.asarray(getattr(m.learner, "weights")(), dtype=np.float64).ravel()  # noqa: B009
    except (AttributeError, NotImplementedError, TypeError, ValueError):
        return None
    if w.shape != (m.space.size(m.form),) or not np.isfinite(w).all():
        return None
    return w


def _experts(m: LiveModel, w: np.ndarray | None) -> dict[str, float] | None:
    if w is None:
        return None
    names = m.space.describe_experts(m.form)
    keep = np.arange(w.size)
    if w.size > MAX_EXPERTS:
        keep = np.sort(np.argsort(-np.abs(w), kind="stable")[:MAX_EXPERTS])
    return {names[i]: float(w[i]) for i in keep}


def _scorecards(m: LiveModel, w: np.ndarray | None) -> list[dict[str, Any]] | None:
    """Each classifier's scorecard (:mod:`app.service.scorecards`; at most MAX_EXPERTS,
    those that voted most), with its weight: the sum of its own sub-experts' (one per
    normalisation, and its split pieces; subsets' averages not counted)."""
    mon = m.monitors.get(scorecards.NAME)
    if not isinstance(mon, scorecards.Scorecards):
        return None
    cards = mon.cards(MAX_EXPERTS)
    for card in cards:
        slots = m.space.expert_slots(card["expert"])
        card["weight"] = None if w is None else float(w[slots].sum())
    return cards


def summarize(m: LiveModel) -> dict[str, Any]:
    """The summary of ``m`` at its current version."""
    voting = _voting(m.learner)
    w = _weights(m)
    return {
        "version": m.version,
        "internal": _internal(m.learner),
        "learners": voting[0] if voting else None,
        "leader": voting[1] if voting else None,
        "experts": _experts(m, w),
        "scorecards": _scorecards(m, w),
    }
