"""The request bodies of the trial calls: one definition each, which both validates and
documents.

Each body is a ``TypedDict`` that pydantic validates and OpenAPI describes (through
:class:`Body`). The calls run thousands of times a second, so :meth:`Body.read` decodes a
body with orjson and validates the document it gives, which is several times faster than
pydantic's reading of the raw JSON; a body that does not fit is read again by the same
rules from its raw JSON, for FastAPI's 422 and its messages.

Numbers are read as orjson reads them (an integer beyond 64 bits becomes a float), also
in the few bodies orjson refuses but pydantic reads (``NaN``, ``Infinity``).

A trial's body whose instance is ``{"experts": {...}}`` or ``{"features": {...}}`` alone
is read faster still by :func:`read_trial`, once its reader is compiled
(:func:`app.core.jsontext.ready`): a compiled pass checks the whole text and
finds its members, and that object stays text (:class:`~models.inputs.batch.RawExperts`,
:class:`~models.inputs.batch.RawFeatures`), which the model reads straight from it. A
body that pass does not read, or whose other members do not plainly fit, is read by
:meth:`Body.read`, which answers it as before. A batch of such trials, ``{"items":
[...]}``, is read so by :func:`read_batch`, all its items in one compiled pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Generic, NotRequired, TypeVar

import numpy as np
import orjson
import pydantic_core
from fastapi.exceptions import RequestValidationError
from pydantic import (
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    TypeAdapter,
    ValidationError,
    with_config,
)
from typing_extensions import TypedDict

from app.core.jsontext import (
    FORM_EXPERTS,
    FORM_FEATURES,
    KIND_FALSE,
    KIND_INT,
    KIND_NULL,
    KIND_STRING,
    KIND_TRUE,
    batch_members,
    ready,
    trial_members,
)
from app.core.names import TrialId
from app.http.schemas import EXAMPLE_INSTANCE, INT64, MAX_LABEL_LENGTH, Label
from models.explain import TOP_DEFAULT, TOP_MOST
from models.inputs.batch import RawExperts, RawFeatures
from storage.keys import valid_trial_id

__all__ = [
    "Body",
    "Explain",
    "ExplainTop",
    "Instance",
    "LabelBatchCreate",
    "LabelCreate",
    "LearnBatchCreate",
    "LearnCreate",
    "PredictBatchCreate",
    "PredictCreate",
    "read_batch",
    "read_label",
    "read_labels",
    "read_trial",
    "read_trials",
]

T = TypeVar("T")
_INTS = (-(2**63), 2**64 - 1)  # the integers orjson reads as integers


def _examples(*docs: dict[str, Any]) -> ConfigDict:
    return ConfigDict(extra="forbid", json_schema_extra={"examples": list(docs)})


@with_config(_examples(EXAMPLE_INSTANCE))
class Instance(TypedDict, total=False):
    features: Annotated[
        Any,
        Field(
            None,
            description="a dense list, or {feature: value} (index or name)",
            examples=[[1, 0]],
        ),
    ]
    experts: Annotated[
        dict[str, Any] | None,
        Field(
            None,
            description="{expert: vote}; a vote is {label: score}, a list of scores in label "
            "order, or a label",
        ),
    ]


#: A predict's ``explain`` and ``explain_top`` (docs/using.rst, Explanations).
Explain = Annotated[
    StrictBool,
    Field(False, description="true: answer each input's part of each label's score"),
]
ExplainTop = Annotated[
    StrictInt,
    Field(
        TOP_DEFAULT,
        ge=1,
        le=TOP_MOST,
        description="with explain: the inputs listed per label, largest parts first",
    ),
]


@with_config(_examples({"instance": EXAMPLE_INSTANCE, "trial_id": "photo-1"}))
class PredictCreate(TypedDict):
    instance: Instance
    trial_id: NotRequired[
        Annotated[TrialId | None, Field(None, description="your id for this trial, else made up")]
    ]
    track: NotRequired[
        Annotated[StrictBool, Field(True, description="false: only predict, expect no label")]
    ]
    explain: NotRequired[Explain]
    explain_top: NotRequired[ExplainTop]


@with_config(_examples({"trial_id": "photo-1", "label": "cat"}))
class LabelCreate(TypedDict):
    trial_id: TrialId
    label: Label


@with_config(_examples({"instance": EXAMPLE_INSTANCE, "label": "cat"}))
class LearnCreate(TypedDict):
    instance: Instance
    label: Label


@with_config(ConfigDict(extra="forbid"))
class PredictBatchCreate(TypedDict):
    items: Annotated[list[PredictCreate], Field(min_length=1)]
    track: NotRequired[
        Annotated[StrictBool | None, Field(None, description="overrides each item's track")]
    ]


@with_config(ConfigDict(extra="forbid"))
class LabelBatchCreate(TypedDict):
    items: Annotated[list[LabelCreate], Field(min_length=1)]


@with_config(ConfigDict(extra="forbid"))
class LearnBatchCreate(TypedDict):
    items: Annotated[list[LearnCreate], Field(min_length=1)]


def _as_orjson(v: Any) -> Any:
    """A document pydantic read, with the numbers orjson would have read."""
    if isinstance(v, dict):
        return {k: _as_orjson(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_as_orjson(x) for x in v]
    if type(v) is int and not _INTS[0] <= v <= _INTS[1]:
        try:
            return float(v)
        except OverflowError:  # beyond a double: infinite, as orjson reads 1e999
            return math.inf if v > 0 else -math.inf
    return v


def _decode(raw: bytes) -> Any:
    """The JSON document ``raw``; ValueError if it is not one."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:  # NaN or Infinity, say, which pydantic reads
        return _as_orjson(pydantic_core.from_json(raw))


def _plain(value: Any) -> bool:
    """Whether orjson can write ``value`` (the answers are orjson's)."""
    try:
        orjson.dumps(value)
    except TypeError:
        return False
    return True


def _refused(e: ValidationError) -> RequestValidationError:
    """FastAPI's 422 for a body that does not fit."""
    errors = e.errors(include_url=False, include_context=False)
    for err in errors:
        err["loc"] = ("body", *err["loc"])
        if isinstance(err.get("input"), bytes):  # a body that is not UTF-8, say
            err["input"] = err["input"][:64].decode("utf-8", "replace")
        elif not _plain(err.get("input")):  # an integer beyond 64 bits, say
            err["input"] = None
    return RequestValidationError(errors)


class Body(Generic[T]):
    """A request body of type ``kind``: :meth:`read` validates one, :meth:`schema`
    describes it."""

    def __init__(self, kind: type[T]) -> None:
        self.name = kind.__name__
        self._adapter: TypeAdapter[T] = TypeAdapter(kind)

    def read(self, raw: bytes) -> T:
        """The body ``raw`` as a ``kind``; a 422 like FastAPI's own when it is not one."""
        try:
            return self._adapter.validate_python(_decode(raw))
        except ValueError:  # not JSON, or not a kind (ValidationError is a ValueError)
            pass
        try:  # the same rules on the raw JSON, for their errors
            return self._adapter.validate_json(raw)
        except ValidationError as e:
            raise _refused(e) from None

    def schema(self, ref_template: str) -> dict[str, Any]:
        """The JSON Schema of the body, its parts under ``$defs``."""
        return self._adapter.json_schema(ref_template=ref_template)


def read_label(raw: bytes) -> dict[str, Any] | None:
    """The body ``raw`` of a label, ``{"trial_id": ..., "label": ...}``, as
    :class:`Body` reads it, when its members plainly fit (read by orjson and checked
    member by member); None otherwise (then read it with :meth:`Body.read`)."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return doc if _plain_label(doc) else None


def read_labels(raw: bytes) -> dict[str, Any] | None:
    """The body ``raw`` of a batch of labels, ``{"items": [...]}``, as :class:`Body`
    reads it, when it and each item plainly fit (as :func:`read_label` reads one); None
    otherwise (then read it with :meth:`Body.read`)."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(doc) is not dict or len(doc) != 1:
        return None
    items = doc.get("items")
    if type(items) is not list or not items or not all(map(_plain_label, items)):
        return None
    return doc


def _plain_label(doc: Any) -> bool:
    """Whether ``doc`` (as orjson read it) is a :class:`LabelCreate` as it stands."""
    if type(doc) is not dict or len(doc) != 2:
        return False
    t, y = doc.get("trial_id"), doc.get("label")
    if type(t) is not str or not valid_trial_id(t):
        return False
    if type(y) is str:
        return len(y) <= MAX_LABEL_LENGTH
    return type(y) is int and -INT64 <= y < INT64


def _text(raw: bytes, a: int, b: int) -> str:
    return raw[a + 1 : b - 1].decode("ascii")  # read by members: ASCII, no escape


def read_trial(
    raw: bytes, fields: frozenset[str], required: frozenset[str]
) -> dict[str, Any] | None:
    """The body ``raw`` of a trial whose instance is ``{"experts": {...}}`` or
    ``{"features": {...}}`` alone, with members among ``fields`` and all of ``required``,
    as the payload it gives (the instance a :class:`RawExperts` or a
    :class:`RawFeatures`) and its other members as :class:`Body` reads them; None when it
    is not plainly so (then read it with :meth:`Body.read`).

    The members: ``instance``; ``trial_id``, null or an id; ``track``, a boolean;
    ``label``, a string of at most 256 characters or an integer; ``op``, a string;
    ``id``, null, a string of at most 256 characters or an integer."""
    if not _may_hold_instance(raw, required) or not ready():
        return None
    n, spans, e0, e1, form = trial_members(np.frombuffer(raw, dtype=np.uint8))
    if n < 0:
        return None
    return _trial(raw, spans[:n].tolist(), e0, e1, form, fields, required)


def read_batch(
    raw: bytes,
    fields: frozenset[str],
    required: frozenset[str],
    top: frozenset[str],
    most: int,
) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """The body ``raw`` of a batch, ``{"items": [...]}`` and members among ``top`` (only
    ``track``, a boolean or null, is read), whose every item is a trial as
    :func:`read_trial` reads it, at most ``most`` of them: the items, and the other
    members; None when it is not plainly so (then read it with :meth:`Body.read`)."""
    if not _may_hold_instance(raw, required) or not ready():
        return None
    n, spans, m, counts, rows, instances = batch_members(np.frombuffer(raw, dtype=np.uint8), most)
    if n < 0 or m <= 0:
        return None
    extras: dict[str, Any] = {}
    for k0, k1, _, _, kind in spans[:n].tolist():
        key = raw[k0:k1].decode("ascii")
        if key == "items":
            continue
        if key != "track" or key not in top:
            return None
        if kind == KIND_NULL:
            extras[key] = None
        elif kind in (KIND_TRUE, KIND_FALSE):
            extras[key] = kind == KIND_TRUE
        else:
            return None
    items = _items(raw, (counts, rows, instances), fields, required)
    return None if items is None else (items, extras)


def read_trials(
    raws: Sequence[bytes], fields: frozenset[str], required: frozenset[str]
) -> list[dict[str, Any]] | None:
    """Several bodies of a trial (a stream's messages), each read as :func:`read_trial`
    reads one, all in one compiled pass: the bodies are joined as a batch's items, and
    an item is a body's trial only when the body begins with ``{`` and ends with ``}``
    and every member of the item lies within it (no body can then close another's object
    or open one of its own). None when one of them is not plainly a trial (then read
    each by itself)."""
    if not raws or not ready() or not all(_may_hold_instance(r, required) for r in raws):
        return None
    if not all(r.lstrip()[:1] == b"{" and r.rstrip()[-1:] == b"}" for r in raws):
        return None
    head = b'{"items":['
    raw = head + b",".join(raws) + b"]}"
    n, _, m, counts, rows, instances = batch_members(np.frombuffer(raw, dtype=np.uint8), len(raws))
    if n != 1 or m != len(raws):  # (``items`` alone, and an item a body)
        return None
    lengths = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
    ends = len(head) + np.cumsum(lengths + 1) - 1  # each body's end in the joined text
    starts = ends - lengths
    used = np.arange(rows.shape[1]) < counts[:, None]
    inside = (rows[:, :, 0] >= starts[:, None]) & (rows[:, :, 3] <= ends[:, None])
    if not (inside | ~used).all():
        return None
    return _items(raw, (counts, rows, instances), fields, required)


def _items(
    raw: bytes, found: tuple[np.ndarray, ...], fields: frozenset[str], required: frozenset[str]
) -> list[dict[str, Any]] | None:
    """A batch's items, ``found`` as :func:`read_batch` finds them (counts, rows and
    instances), each read as :func:`_trial` reads one; None when one is not plainly a
    trial."""
    counts, rows, instances = found
    alike = _alike(raw, counts, rows, instances, fields, required)
    if alike is not None:
        return alike
    items = []
    for t, (count, (e0, e1, form)) in enumerate(
        zip(counts.tolist(), instances.tolist(), strict=True)
    ):
        got = _trial(raw, rows[t, :count].tolist(), e0, e1, form, fields, required)
        if got is None:
            return None
        items.append(got)
    return items


def _alike(
    raw: bytes,
    counts: np.ndarray,
    rows: np.ndarray,
    instances: np.ndarray,
    fields: frozenset[str],
    required: frozenset[str],
) -> list[dict[str, Any]] | None:
    """The items of a batch (as :func:`read_batch` finds them) as :func:`_trial` reads
    each, read member by member across the items when every item has the first one's
    members, in its order and of its kinds, and instances of one form, as a batch's items
    usually have; None when they do not, or one is not plainly a trial."""
    c = int(counts[0])
    if c == 0 or (counts != c).any():
        return None
    rows = rows[:, :c]
    first = rows[0]
    if (rows[:, :, 4] != first[:, 4]).any():
        return None
    lengths = rows[:, :, 1] - rows[:, :, 0]
    if (lengths != lengths[0]).any():
        return None
    b = np.frombuffer(raw, dtype=np.uint8)
    for j, size in enumerate(lengths[0].tolist()):  # the same key, each item
        at = rows[:, j, :1] + np.arange(size)
        if (b[at] != b[at[0]]).any():
            return None
    keys = [raw[k0:k1].decode("ascii") for k0, k1 in first[:, :2].tolist()]
    if not fields.issuperset(keys) or not required.issubset(keys):
        return None
    out: list[dict[str, Any]] = [{} for _ in range(counts.size)]
    for j, key in enumerate(keys):
        if key == "instance":
            form = instances[:, 2]
            if (form != form[0]).any():
                return None
            make = _raw_payload(int(form[0]))
            column = [make(raw, a, z) for a, z in instances[:, :2].tolist()]
        else:
            column = _column(raw, key, int(first[j, 4]), rows[:, j, 2:4])
        if any(v is _UNREAD for v in column):
            return None
        for item, value in zip(out, column, strict=True):
            item[key] = value
    return out


def _column(raw: bytes, key: str, kind: int, spans: np.ndarray) -> list[Any]:
    """The values of member ``key`` (not ``instance``), of ``kind`` at ``raw[v0:v1]`` for
    each row ``(v0, v1)`` of ``spans``, as :func:`_member` reads each: integers and
    plain strings of a batch's labels read without its checks."""
    at = spans.tolist()
    if kind == KIND_INT and key in _INTEGRAL:
        return [int(raw[v0:v1]) for v0, v1 in at]
    longest = int((spans[:, 1] - spans[:, 0]).max()) - 2  # a string's, quotes apart
    if kind == KIND_STRING and key == "label" and longest <= MAX_LABEL_LENGTH:
        return [raw[v0 + 1 : v1 - 1].decode("ascii") for v0, v1 in at]
    return [_member(raw, key, kind, v0, v1) for v0, v1 in at]


def _may_hold_instance(raw: bytes, required: frozenset[str]) -> bool:
    """False when the compiled readers would read ``raw`` only to refuse it: an instance
    is required, and the text lacks both ``"experts"`` and ``"features"`` (their members
    have no escapes). Their pass costs more than the search."""
    return "instance" not in required or b'"experts"' in raw or b'"features"' in raw


def _trial(
    raw: bytes,
    spans: list[list[int]],
    e0: int,
    e1: int,
    form: int,
    fields: frozenset[str],
    required: frozenset[str],
) -> dict[str, Any] | None:
    """The trial whose members are ``spans`` in ``raw`` (as :func:`read_trial` reads
    them), its instance's experts or features object (``form``) at ``raw[e0:e1]`` (-1
    when it has neither alone); None when it is not plainly one."""
    out: dict[str, Any] = {}
    for k0, k1, v0, v1, kind in spans:
        key = raw[k0:k1].decode("ascii")
        if key not in fields:
            return None
        if key == "instance":
            value = _raw_payload(form)(raw, e0, e1)
        else:
            value = _member(raw, key, kind, v0, v1)
        if value is _UNREAD:
            return None
        out[key] = value
    return out if required <= out.keys() else None


_UNREAD: Any = object()  # a member the compiled readers leave to Body.read


def _unread(raw: bytes, a: int, z: int) -> Any:
    return _UNREAD


def _raw_payload(form: int) -> Callable[[bytes, int, int], Any]:
    """What makes an instance of ``form`` (as the compiled readers find it) from its
    text and span: :class:`RawExperts`, :class:`RawFeatures`, or for no form, what gives
    ``_UNREAD``."""
    return RawExperts if form == FORM_EXPERTS else RawFeatures if form == FORM_FEATURES else _unread


def _member(raw: bytes, key: str, kind: int, v0: int, v1: int) -> Any:
    """The value of member ``key`` (not ``instance``), of ``kind`` at ``raw[v0:v1]``, as
    :class:`Body` reads it; ``_UNREAD`` when it is not plainly one."""
    if key == "track":
        return kind == KIND_TRUE if kind in (KIND_TRUE, KIND_FALSE) else _UNREAD
    if kind == KIND_NULL and key in _NULLABLE:
        return None
    if kind == KIND_STRING and v1 - v0 - 2 <= MAX_LABEL_LENGTH:
        t = _text(raw, v0, v1)
        return t if key != "trial_id" or valid_trial_id(t) else _UNREAD
    if kind == KIND_INT and key in _INTEGRAL:  # at most 18 digits: within int64
        return int(raw[v0:v1])
    return _UNREAD


_NULLABLE = frozenset({"trial_id", "id"})
_INTEGRAL = frozenset({"label", "id"})
