"""The bytes each kind of learner holds, by kind, for :func:`models.budget.estimate_bytes`.

Every function takes a kind's checked parameters and the context it is built in, and
returns an upper bound of the bytes of the numpy arrays the learner (with its nested
learners) holds, as built and as it learns. Each mirrors the arrays its kind's module
allocates, named in the comments; sizes are 8 bytes (float64, int64) unless said.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from models.core.learner import Learner
from models.core.nested import HasInner, inner_spec
from models.core.params import InvalidParameter
from models.ensembles.codes import MAX_EXHAUSTIVE, default_length
from models.ensembles.ecoc import CODES, MAX_CLASSES
from models.registry import CONTEXT_PARAMS, KINDS, kind_of
from models.voting.presets import basic_algorithms, vr_combine_learners

__all__ = ["ESTIMATORS", "Context", "at", "ecoc_columns", "estimate", "read", "spec_kind"]

_W = 8  # bytes of a float64 or an int64
_SCRATCH = _W * (128 + 64)  # the scratch a learner allocates first (models.kernels.common.Scratch)
#: Each kind's parameter defaults (inspect.signature is slow for a spec of 200 learners).
_DEFAULTS = {kind: cls.param_defaults() for kind, cls in KINDS.items()}


@dataclass(frozen=True)
class Context:
    """What a learner is built for: k classes, n attributes or sub-experts, instances of at
    most m non-zeros (triples when ``experts``), and whether its own Python trial runs."""

    k: int
    n: int
    m: int
    experts: bool
    direct: bool = True


def at(path: str, name: str) -> str:
    """The dotted path of ``name`` inside the spec at ``path``."""
    return f"{path}.{name}" if path else name


def spec_kind(spec: Any) -> str:
    return str(spec.kind if isinstance(spec, Learner) else spec.get("kind"))


def read(spec: Any, path: str) -> tuple[str, dict[str, Any]]:
    """A spec's kind and parameters (defaults filled in, context left out), each checked."""
    if isinstance(spec, Learner):
        spec = inner_spec(spec)
    try:
        cls = kind_of(spec)
    except InvalidParameter as exc:
        # kind_of names a spec that is not an object "learner": here that is the path
        where = path or exc.name if exc.name == "learner" else at(path, exc.name)
        raise InvalidParameter(where, exc.value, exc.expected) from None
    params = {k: v for k, v in _DEFAULTS[cls.kind].items() if k not in CONTEXT_PARAMS}
    for name, value in spec.items():
        constraint = cls._parameter_constraints.get(name)
        if name in CONTEXT_PARAMS or constraint is None:
            continue  # context comes from the caller; build refuses unknown names
        expected = constraint.check(value)
        if expected is not None:
            raise InvalidParameter(at(path, name), value, expected)
        params[name] = value
    for name in cls.param_names():
        if name not in params and name not in CONTEXT_PARAMS:
            raise InvalidParameter(at(path, name), None, f"a value (required by {cls.kind})")
    return cls.kind, params


def estimate(spec: Any, c: Context, path: str) -> int:
    kind, params = read(spec, path)
    return ESTIMATORS[kind](params, c, path)


def ecoc_columns(code: Any, length: Any, k: int | None) -> int:
    """The columns of ECOC's code for k classes (k None: the most any k allows)."""
    if code not in CODES:
        code = None
    if k is None:
        top = MAX_EXHAUSTIVE if code == "exhaustive" else MAX_CLASSES
        return max(ecoc_columns(code, length, j) for j in range(2, top + 1))
    code = code or ("exhaustive" if k <= 7 else "random")
    if code == "one-per-class":
        return k
    if code == "dense":
        return max(1, (k - 1).bit_length())
    if code == "exhaustive":
        return int(2 ** (k - 1) - 1)
    return length if isinstance(length, int) and length > 0 else default_length(k)


# -- shared pieces ---------------------------------------------------------------------------


def _scratch(c: Context) -> int:
    """Learner._scratch: grown to (2k + 4m floats, 2m ints) by a trial over m non-zeros;
    a learner a compiled wrapper drives only predicts, with the first size."""
    if not c.direct:
        return _SCRATCH
    return _W * (max(128, 2 * c.k + 4 * c.m) + max(64, 2 * c.m))


def _width(m: int) -> int:
    """Recycling's store width: from 1, widened to max(need, 2 * width) when an instance
    does not fit, so at most 2m - 2 for instances of up to m non-zeros."""
    return 1 if m <= 1 else 2 * m - 2


def _rows(spec: Any) -> int:
    """Rows of the linear view of the learner a spec builds (Balanced Winnow: w+ and w-)."""
    while isinstance(spec, Mapping | Learner) and spec_kind(spec) in KINDS:
        kind = spec_kind(spec)
        if not issubclass(KINDS[kind], HasInner):
            return 2 if kind == "balanced-winnow" else 1
        spec = inner_spec(spec)["learner"]
    return 1


def _sums(rows: int, c: Context) -> int:
    """Averaging's own arrays: acc_, seen_ (rows, n), mark_, totals_, _coef, _out, _rule."""
    return _W * (2 * rows * c.n + c.n + 5 + 3 * rows + c.k + 3)  # totals_: 5 + 2 rows


# -- one function per kind -------------------------------------------------------------------


def _vector(p: dict[str, Any], c: Context, path: str) -> int:
    return _W * (c.n + 7)  # winnow, perceptron, multiclass-winnow: w_, _prm (at most 7)


def _balanced(p: dict[str, Any], c: Context, path: str) -> int:
    return _W * (2 * c.n + 2 + 6)  # w_ (n, 2), scalars_, _prm


def _alma(p: dict[str, Any], c: Context, path: str) -> int:
    return _W * (2 * c.n + 4 + 6)  # dual_ (2, n), scalars_, _prm


def _committee(p: dict[str, Any], c: Context, path: str) -> int:
    return _W * (c.n + 5 + 3) + _scratch(c)  # r_, scalars_, _prm


def _weighted_majority(p: dict[str, Any], c: Context, path: str) -> int:
    return _W * (c.n + 3)  # u_, scalars_


def _subexpert(p: dict[str, Any], c: Context, path: str) -> int:
    inner = replace(c, k=2, m=min(c.m, c.n), experts=False, direct=False)
    return estimate(p["learner"], inner, at(path, "learner")) + _scratch(c)


def _recycling(p: dict[str, Any], c: Context, path: str) -> int:
    inner = p["learner"]
    compiled = KINDS.get(spec_kind(inner), Learner).kernel_state is not Learner.kernel_state
    held = estimate(inner, replace(c, direct=not compiled), at(path, "learner"))
    s = p["size"]  # items_a_, items_b_, items_v_ (s, width); len, y, count (s); ring_, internal_
    return held + _W * (3 * s * _width(c.m) + 3 * s + 2 + 3)


def _averaging(p: dict[str, Any], c: Context, path: str) -> int:
    inner = estimate(p["learner"], replace(c, direct=True), at(path, "learner"))
    return inner + _sums(_rows(p["learner"]), c)


def _ecoc(p: dict[str, Any], c: Context, path: str) -> int:
    columns = ecoc_columns(p["code"], p["length"], c.k)
    column = estimate(p["learner"], replace(c, k=2, direct=True), at(path, "learner"))
    return columns * column + c.k * columns * (_W + 1)  # code_ (float64), _code (uint8)


def _bagging(p: dict[str, Any], c: Context, path: str) -> int:
    model = estimate(p["learner"], replace(c, direct=True), at(path, "learner"))
    return p["n_models"] * model


def _boosting(p: dict[str, Any], c: Context, path: str) -> int:
    return _bagging(p, c, path) + _W * 2 * p["n_models"]  # lambda_sc_, lambda_sw_


def _v_combine(p: dict[str, Any], c: Context, path: str) -> int:
    members = list(p["learners"])
    return _voting(members, p, c, [at(path, f"learners.{i}") for i in range(len(members))])


def _vr_combine(p: dict[str, Any], c: Context, path: str) -> int:
    basics = basic_algorithms(p["alphas"], p["ps"], p["perceptron"], p["alma_C"])
    members = vr_combine_learners(basics, p["size"], p["max_updates"])
    return _voting(members, p, c, [path] * len(members))


# -- V-Combine ------------------------------------------------------------------------------


def _normal(value: Any) -> Any:
    """A spec as the learner built from it reports it (defaults filled in, no context), to
    find the averaged members that follow another member (models.voting.members.find_followers)."""
    if isinstance(value, Learner):
        return inner_spec(value)
    if isinstance(value, Mapping):
        kind = value.get("kind")
        if isinstance(kind, str) and kind in KINDS:
            value = {**_DEFAULTS[kind], **value}
        return {k: _normal(v) for k, v in value.items() if k not in CONTEXT_PARAMS}
    if isinstance(value, list | tuple):
        return [_normal(v) for v in value]
    return value


def _voting(members: list[Any], p: dict[str, Any], c: Context, paths: list[str]) -> int:
    """V-Combine's members (an averaged member that follows another holds its own sums
    only), its counters, h slot hypotheses and the r-buffer's instances, plus what the
    compiled trial (models.voting.compiled) keeps when the members allow it."""
    own = [
        estimate(m, replace(c, direct=True), path) for m, path in zip(members, paths, strict=True)
    ]
    normal = [_normal(m) for m in members]
    leads = {
        j: normal.index(s["learner"])
        for j, s in enumerate(normal)
        if s["kind"] == "averaging" and s["learner"] in normal
    }
    v, h, r, n = len(members), p["h"], p["r"], c.n
    rows = {j: _rows(normal[j]["learner"]) for j in leads}
    held = sum(_sums(rows[j], c) if j in leads else own[j] for j in range(v))
    held += _W * (3 * v + 4 + h * n + r * c.m * (3 if c.experts else 2))
    if not _compiled(normal, leads, p, c):
        return held
    w, top = _width(c.m), max(rows.values(), default=1)
    recycled = v - len(leads)
    return held + _W * (
        3 * v + 2 * recycled + len(leads)  # role, idx, lead; families, update caps; rows
        + sum(top - x for x in rows.values()) * (2 * n + 1)  # sums padded to common blocks
        + 3 * r * w + 3 * r + 2  # the r-buffer, packed
        + h * n + h  # the slots' weights and scales, packed
        + c.k + 2 * w + 2 * c.k + 3 * v + n  # scratch, scores, outcomes, a dense row
    )  # fmt: skip


def _compiled(normal: list[Any], leads: dict[int, int], p: dict[str, Any], c: Context) -> bool:
    """Whether V-Combine runs its members compiled (models.voting.compiled.CompiledMembers.of)."""
    if not c.experts or p["vote_normalize"] != "none":
        return False
    if p["select"] == "weighted-majority" and p["wm_update"] == "on_mistake":
        return False
    sizes = set()
    for j, s in enumerate(normal):
        if j in leads:
            if leads[j] in leads:
                return False
        elif s["kind"] == "recycling" and spec_kind(s["learner"]) == "subexpert":
            sizes.add(s["size"])
        else:
            return False
    return len(sizes) <= 1


ESTIMATORS: dict[str, Callable[[dict[str, Any], Context, str], int]] = {
    "winnow": _vector,
    "balanced-winnow": _balanced,
    "perceptron": _vector,
    "alma": _alma,
    "committee": _committee,
    "multiclass-winnow": _vector,
    "weighted-majority": _weighted_majority,
    "subexpert": _subexpert,
    "recycling": _recycling,
    "averaging": _averaging,
    "v-combine": _v_combine,
    "ecoc": _ecoc,
    "bagging": _bagging,
    "boosting": _boosting,
    "vr-combine": _vr_combine,
    "fusion": _weighted_majority,
}
