"""What a learner spec will cost, read from the spec alone, before anything is built.

:func:`estimate_bytes` bounds the bytes of numpy arrays held by the learner that
``registry.build(spec, labels=labels, size=size)`` returns, as built and as it learns
(stores that widen, buffers that fill, scratch space that grows), with one function per
kind (:data:`ESTIMATORS`, in :mod:`models.budget_kinds`). :func:`check_spec` walks a spec
without recursion and refuses one nested too deep or building too many learners. Neither
allocates anything of the learner's size.

>>> spec = {"kind": "recycling", "size": 10, "learner": {"kind": "perceptron"}}
>>> estimate_bytes(spec, labels=[1, -1], size=100)  # w_, _prm, a store of 10 x 198, counters
48656
>>> count_learners(spec)
2
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any

from models.budget_kinds import ESTIMATORS, Context, at, ecoc_columns, estimate, read
from models.core.learner import Learner
from models.core.nested import inner_spec
from models.core.params import InvalidParameter
from models.registry import KINDS
from models.voting.presets import ALPHAS, PS, basic_algorithms, vr_combine_learners

__all__ = [
    "ESTIMATORS",
    "MAX_DEPTH",
    "MAX_LEARNERS",
    "check_spec",
    "count_learners",
    "estimate_bytes",
]

#: The deepest nesting of learner specs (the spec itself is level 1).
MAX_DEPTH = 8
#: The most learner objects building one spec may create, every wrapper's copies and
#: VR-Combine's members included (VR-Combine's default creates 218).
MAX_LEARNERS = 512
#: :func:`estimate_bytes` recurses along the spec, so it refuses nesting deeper than this.
_DEEPEST = 64

_Node = tuple[Any, str, int, int, "int | None"]  # spec, path, depth, copies built, classes


def _fanout(kind: str, spec: Mapping[str, Any], k: int | None) -> tuple[int, int | None]:
    """How many times a wrapper builds its nested spec, and for how many classes."""
    if kind == "subexpert":
        return 1, 2
    if kind == "ecoc":  # one column to check the spec, then one per column of the code
        return 1 + ecoc_columns(spec.get("code"), spec.get("length"), k), 2
    if kind in ("bagging", "boosting"):  # one copy to check the spec, then n_models
        n = spec.get("n_models", 10)
        return 1 + (max(n, 0) if isinstance(n, int) else 10), k
    return 1, k


def _children(spec: Any, path: str, depth: int, copies: int, k: int | None) -> Iterator[_Node]:
    if isinstance(spec, Learner):
        spec = inner_spec(spec)
    if not isinstance(spec, Mapping):
        return
    kind = spec.get("kind")
    if kind == "v-combine" and isinstance(spec.get("learners"), list | tuple):
        for i, member in enumerate(spec["learners"]):
            yield member, at(path, f"learners.{i}"), depth + 1, copies, k
    elif isinstance(kind, str) and kind in KINDS and "learner" in KINDS[kind].param_names():
        inner = spec.get("learner")
        if isinstance(inner, Mapping | Learner):
            times, classes = _fanout(kind, spec, k)
            yield inner, at(path, "learner"), depth + 1, copies * times, classes


def _nodes(spec: Any, k: int | None) -> Iterator[_Node]:
    """Every nested spec, parents first, walked with a stack of iterators (no recursion)."""
    stack: list[Iterator[_Node]] = [iter([(spec, "", 1, 1, k)])]
    while stack:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
            continue
        yield item
        stack.append(_children(*item))


def _generated(spec: Any) -> int:
    """The learners VR-Combine creates for its members (0 for any other spec)."""
    if not isinstance(spec, Mapping) or spec.get("kind") != "vr-combine":
        return 0
    basics = sum(
        len(v) if isinstance(v, list | tuple) else len(default)
        for v, default in ((spec.get("alphas"), ALPHAS), (spec.get("ps"), PS))
    )
    basics += spec.get("perceptron", True) is not False
    one = vr_combine_learners(basic_algorithms((2.0,), (), False))  # one basic's members
    return basics * sum(count_learners(member) for member in one)


def count_learners(spec: Any, *, labels: Sequence[Hashable] | None = None) -> int:
    """How many learner objects ``build`` creates for ``spec``, counting a wrapper's copies
    and the one it builds to check its nested spec. ECOC's count depends on the labels;
    without them it is the most any number of labels gives."""
    k = None if labels is None else len(labels)
    return sum(copies * (1 + _generated(node)) for node, _, _, copies, _ in _nodes(spec, k))


def check_spec(
    spec: Any,
    *,
    max_depth: int = MAX_DEPTH,
    max_learners: int = MAX_LEARNERS,
    labels: Sequence[Hashable] | None = None,
) -> None:
    """Refuse a spec nested deeper than ``max_depth`` levels or building more than
    ``max_learners`` learner objects (:func:`count_learners`), walking it without recursion.

    Raises InvalidParameter named by the dotted path of the offending place
    (``learner.learner``, ``learners.3``; ``alphas`` for VR-Combine's own members). Every
    other check is left to ``build``. Pass ``labels`` for ECOC's exact count.
    """
    if max_depth < 1 or max_learners < 1:
        raise ValueError("max_depth and max_learners must be at least 1")
    total = 0
    for node, path, depth, copies, _ in _nodes(spec, None if labels is None else len(labels)):
        if depth > max_depth:
            raise InvalidParameter(
                path,
                f"a learner {depth} levels deep",
                f"learners nested at most {max_depth} levels deep (max_depth)",
            )
        made = _generated(node)
        total += copies * (1 + made)
        if total > max_learners:
            raise InvalidParameter(
                at(path, "alphas") if made else path,
                f"{total} learners so far",
                f"a spec that builds at most {max_learners} learners in all (max_learners)",
            )


def estimate_bytes(
    spec: Any, *, labels: Sequence[Hashable], size: int, max_nonzeros: int | None = None
) -> int:
    """An upper bound of the bytes of numpy arrays ``build(spec, labels=labels, size=size)``
    will hold, as built and as it learns, computed from the spec alone.

    ``max_nonzeros`` is the most non-zeros one instance can have (at most, and by default,
    ``size`` for attribute learners and ``size * len(labels)`` for sub-expert learners);
    stored instances scale with it. Context parameters in the spec are ignored. Raises
    InvalidParameter, named by the dotted path, for a kind or a value ``build`` refuses.
    """
    k, n = len(labels), max(int(size), 0)
    for node, path, depth, _, _ in _nodes(spec, k):
        if depth > _DEEPEST:
            raise InvalidParameter(
                path, f"a learner {depth} levels deep", f"at most {_DEEPEST} levels"
            )
        read(node, path)
    kind, params = read(spec, "")
    experts = KINDS[kind].input_kind_for(params) == "experts"
    most = n * k if experts else n
    m = most if max_nonzeros is None else max(0, min(most, max_nonzeros))
    return estimate(spec, Context(k, n, m, experts), "")
