"""A model's log, out and in, as NDJSON (one JSON document a line): ``GET .../log`` pages
through it, ``POST .../log`` replays a labelled history into the model, and
``GET .../log/imports/{import_id}`` says where an import resumes.

What a line of either holds is in :mod:`app.service.log_export` and
:mod:`app.service.log_import`; this module reads and bounds the request, line by line.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

import orjson
from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    with_config,
)
from typing_extensions import TypedDict

from app.core.names import TrialId
from app.http.bodies import Body, Instance
from app.http.deps import NameDep, ServiceDep
from app.http.error_status import item_error
from app.http.permissions import ADMIN, READ, WRITE, access
from app.http.routers.common import body
from app.http.schemas import (
    AS_INT,
    EXAMPLE_INSTANCE,
    INT64,
    MAX_LABEL_LENGTH,
    ExpertsChange,
    FeaturesChange,
    Label,
    LabelsChange,
)
from app.service.access import principal_of
from app.service.log_export import read_page
from app.service.log_import import (
    BLOCK,
    IMPORT_ID_PATTERN,
    ChangeLine,
    Line,
    TrialLine,
    apply_lines,
    resume_line,
)
from storage.keys import valid_trial_id

router = APIRouter(prefix="/v1/models/{name}", tags=["log"])

NDJSON = "application/x-ndjson"
MAX_SEQ = 2**62  # a log's versions (Redis stream ids)
NEXT_FROM = "Committee-Next-From"
LOG_VERSION = "Committee-Log-Version"
PAGE_HEADERS = (NEXT_FROM, LOG_VERSION)  # what a page of the log answers beside it
Seq = Annotated[int, Field(strict=True, ge=1, le=MAX_SEQ), AS_INT]


@with_config(
    ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"instance": EXAMPLE_INSTANCE, "label": "cat"}]},
    )
)
class LogTrialLine(TypedDict):
    """A trial to learn, as ``POST .../learn`` takes it; the other members are those an
    export writes, taken and left as they are."""

    instance: Instance
    label: Label
    trial_id: NotRequired[TrialId | None]
    kind: NotRequired[Literal["learn", "label"]]
    seq: NotRequired[Seq]
    predicted: NotRequired[Label]
    served_at: NotRequired[Annotated[int, Field(strict=True, ge=0, le=MAX_SEQ), AS_INT]]


@with_config(ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1}))
class LogChange(TypedDict, total=False):
    experts: ExpertsChange
    features: FeaturesChange
    labels: LabelsChange


@with_config(
    ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"kind": "change", "change": {"experts": {"add": ["vit"]}}}]
        },
    )
)
class LogChangeLine(TypedDict):
    """A change of the model's input, as ``POST .../experts`` (``.../features``,
    ``.../labels``) takes it: needs an admin key."""

    kind: Literal["change"]
    change: LogChange
    seq: NotRequired[Seq]


def _line_kind(doc: Any) -> str:
    return "change" if isinstance(doc, dict) and doc.get("kind") == "change" else "trial"


LogLineCreate = Annotated[
    Annotated[LogTrialLine, Tag("trial")] | Annotated[LogChangeLine, Tag("change")],
    Discriminator(_line_kind),
]


class _LineBody(Body[Any]):
    """One line of ``POST .../log``, described under ``components`` as a body is."""

    def __init__(self) -> None:
        self.name = "LogLineCreate"
        self._adapter = TypeAdapter(LogLineCreate)

    def validate(self, doc: Any) -> Any:
        return self._adapter.validate_python(doc)


LINE = _LineBody()


class LineError(BaseModel):
    line: int = Field(description="the line's number in the import (from 1)")
    status: int
    message: str
    field: str | None = None


class LogImportPublic(BaseModel):
    import_id: str
    first_line: int
    lines: int = Field(description="lines in the request, blank ones included")
    applied: int = Field(description="lines appended to the log now")
    already: int = Field(description="lines an earlier request of this import appended")
    failed: int = Field(description="lines refused, each in errors")
    errors: list[LineError]
    next_line: int = Field(description="the first line of the next request")
    model_version: int


class ImportProgressPublic(BaseModel):
    import_id: str
    next_line: int = Field(description="the line the import resumes at (1: none is kept)")
    block: int = Field(description="lines a request's first line starts a block of")


ImportIdQuery = Annotated[
    str, Query(pattern=IMPORT_ID_PATTERN, description="your name for this import")
]
ImportIdPath = Annotated[str, Path(pattern=IMPORT_ID_PATTERN, description="the import's id")]
FirstLine = Annotated[
    int,
    Query(
        ge=1,
        le=MAX_SEQ,
        description=f"the number of the body's first line in the import: 1 + a multiple of {BLOCK}",
    ),
]
FromQuery = Annotated[
    int,
    Query(
        alias="from",
        ge=0,
        le=MAX_SEQ,
        description="the version to start after (0: from the model's creation)",
    ),
]
LimitQuery = Annotated[
    int | None,
    Query(ge=1, le=MAX_SEQ, description="entries at most (max_log_entries when not given)"),
]

_LINES_SCHEMA = {"$ref": "#/components/schemas/LogLineCreate"}
_PAGE_HEADERS = {
    NEXT_FROM: {
        "description": "the version of the last entry given: the next page's from",
        "schema": {"type": "integer", "minimum": 0},
    },
    LOG_VERSION: {
        "description": "the model's version when read: more entries follow while "
        f"{NEXT_FROM} is below it",
        "schema": {"type": "integer", "minimum": 0},
    },
}
_PAGE = {
    200: {
        "description": "the entries, one JSON document a line",
        "content": {NDJSON: {"schema": {"type": "object"}}},
        "headers": _PAGE_HEADERS,
    }
}


def _refused(line: int | None, msg: str, *loc: str | int) -> RequestValidationError:
    """A 422 naming line ``line`` of the body (None: the body)."""
    where = ("body",) if line is None else ("body", "lines", line, *loc)
    return RequestValidationError([{"loc": where, "msg": msg, "type": "value_error"}])


_TRIAL_MEMBERS = frozenset(LogTrialLine.__annotations__)
_INSTANCE_MEMBERS = frozenset({"features", "experts"})
_NOT_REPLAYED = {
    "reset": "a reset (a state import or a rollback) cannot be replayed: the state it "
    "put in place is not in the log",
    "unreadable": "an entry no worker could read cannot be replayed",
    "challenger": "a shadow challenger's entry (attached, promoted, retired) belongs to "
    "its model's log: attach one to this model with POST .../challengers",
}


def _plain_label(y: Any) -> bool:
    if type(y) is str:
        return len(y) <= MAX_LABEL_LENGTH
    return type(y) is int and -INT64 <= y < INT64


def _plain_trial(doc: Any) -> bool:
    """Whether ``doc`` is a :class:`LogTrialLine` as it stands (checked member by member,
    faster than the schema; anything else is read by the schema, which says why)."""
    if type(doc) is not dict or "instance" not in doc or "label" not in doc:
        return False
    if not _TRIAL_MEMBERS.issuperset(doc) or not _plain_label(doc["label"]):
        return False
    x = doc["instance"]
    if type(x) is not dict or not _INSTANCE_MEMBERS.issuperset(x):
        return False
    if x.get("experts") is not None and type(x["experts"]) is not dict:
        return False
    t = doc.get("trial_id")
    if t is not None and not (type(t) is str and valid_trial_id(t)):
        return False
    if doc.get("kind", "learn") not in ("learn", "label"):
        return False
    if "predicted" in doc and not _plain_label(doc["predicted"]):
        return False
    low = {"seq": 1, "served_at": 0}
    return all(k not in doc or (type(doc[k]) is int and low[k] <= doc[k] <= MAX_SEQ) for k in low)


def _payload(x: dict[str, Any]) -> dict[str, Any]:
    """The instance as the service takes it: without the parts given as null."""
    return {k: v for k, v in x.items() if v is not None}


def _read_line(text: bytes, line: int) -> Line:
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise _refused(line, f"line {line} is not JSON: {e}") from None
    if type(doc) is dict:
        kind = doc.get("kind")
        why = _NOT_REPLAYED.get(kind) if isinstance(kind, str) else None
        if why is not None:
            raise _refused(line, f"line {line}: {why}", "kind")
        if "x" in doc and "instance" not in doc:
            raise _refused(
                line,
                f"line {line}: an instance given as the learner's coordinates (x) cannot be "
                "imported: the model it was exported from has an input that does not keep "
                "its payloads (hashed features or normalised votes)",
                "x",
            )
    if not _plain_trial(doc):
        try:
            doc = LINE.validate(doc)
        except ValidationError as e:
            errors = []
            for err in e.errors(include_url=False, include_context=False):
                loc = err["loc"]
                if loc and loc[0] in ("trial", "change"):  # the union's tags
                    loc = loc[1:]
                where = ("body", "lines", line, *loc)
                msg = f"line {line}: {err['msg']}"
                errors.append({"loc": where, "msg": msg, "type": err["type"]})
            raise RequestValidationError(errors) from None
    if doc.get("kind") == "change":
        change = {k: v.model_dump(exclude_none=True) for k, v in doc["change"].items()}
        if not change:
            raise _refused(
                line, f"line {line}: a change holds experts, features or labels", "change"
            )
        return ChangeLine(line, text, change)
    return TrialLine(line, text, _payload(doc["instance"]), doc["label"])


def read_lines(raw: bytes, first_line: int, most: int, most_bytes: int) -> tuple[int, list[Line]]:
    """The lines of an NDJSON body (blank ones counted, and left out), each read; a 422
    naming the first line that is not JSON, not a line of the schema or longer than
    ``most_bytes``, or the body when it holds no line or more than ``most``."""
    if not raw:
        raise _refused(None, "no lines: expected one JSON document a line (NDJSON)")
    parts = raw.split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    if len(parts) > most:
        raise _refused(None, f"{len(parts)} lines: expected at most {most} (max_import_lines)")
    out: list[Line] = []
    for i, text in enumerate(parts):
        line = first_line + i
        if text.endswith(b"\r"):
            text = text[:-1]
        if len(text) > most_bytes:
            raise _refused(
                line,
                f"line {line} has {len(text)} bytes: expected at most {most_bytes} "
                "(max_import_line_bytes)",
            )
        if text.strip():
            out.append(_read_line(text, line))
    return len(parts), out


@router.get("/log", response_class=Response, responses=_PAGE)  # type: ignore[arg-type]
@access(READ, model="name")
async def export_log(
    name: NameDep, service: ServiceDep, from_: FromQuery = 0, limit: LimitQuery = None
) -> Response:
    """The model's log after version ``from``, one entry a line (NDJSON): trials learned,
    predictions served and their labels, changes of the input, resets of the state; at
    most ``limit`` entries (``max_log_entries``). ``Committee-Next-From`` is the next
    page's ``from``; ``Committee-Log-Version`` the model's version when read. 422 naming
    ``from`` for a version beyond the model's, or before the first entry its log still
    holds (a snapshot took the place of those before)."""
    most = service.settings.max_log_entries
    page = await read_page(service, name, from_, most if limit is None else limit)
    headers = {NEXT_FROM: str(page.next_from), LOG_VERSION: str(page.version)}
    return Response(b"".join(page.lines), media_type=NDJSON, headers=headers)


_IMPORT_BODY = body(LINE)
_IMPORT_BODY["requestBody"]["content"] = {NDJSON: {"schema": _LINES_SCHEMA}}


@router.post("/log", response_model=LogImportPublic, openapi_extra=_IMPORT_BODY)
@access(WRITE, model="name")
async def import_log(
    name: NameDep,
    request: Request,
    service: ServiceDep,
    import_id: ImportIdQuery,
    first_line: FirstLine = 1,
) -> Response:
    """Replay a labelled history into the model through its log: one line a trial to
    learn (``{"instance", "label"}``, as ``POST .../learn`` takes it) or a change of its
    input (``{"kind": "change", "change": ...}``, with an admin key); an export's lines
    as they are. Idempotent by line: lines come in blocks of 100 (by their number from
    ``first_line``), each appended at most once under ``import_id``, so a retry or a
    rerun appends nothing twice (``already``); ``GET .../log/imports/{import_id}`` says
    where to resume. A line's fault of the model's (an unknown label, say) is in
    ``errors`` with its number; a line that is not JSON or not of the schema, longer
    than ``max_import_line_bytes``, or more lines than ``max_import_lines`` are a 422
    naming it, and nothing is appended."""
    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype != NDJSON:
        return Response(
            orjson.dumps({"detail": f"expected Content-Type: {NDJSON} (one JSON document a line)"}),
            status_code=415,
            media_type="application/json",
        )
    s = service.settings
    count, lines = read_lines(
        await request.body(), first_line, s.max_import_lines, s.max_import_line_bytes
    )
    done = await apply_lines(
        service,
        name,
        import_id,
        first_line,
        count,
        lines,
        may_change=principal_of(request.scope).may(ADMIN),
        admit=request.scope.get("committee.admit"),
    )
    refused = sorted(done.errors, key=lambda err: err[0])
    errors = [{"line": line, **item_error(e, f"lines.{line}.")} for line, e in refused]
    answer = LogImportPublic(
        import_id=import_id,
        first_line=first_line,
        lines=done.lines,
        applied=done.applied,
        already=done.already,
        failed=len(errors),
        errors=[LineError(**e) for e in errors],
        next_line=done.next_line,
        model_version=done.model_version,
    )
    return Response(answer.model_dump_json().encode(), media_type="application/json")


@router.get("/log/imports/{import_id}")
@access(READ, model="name")
async def import_progress(
    name: NameDep, import_id: ImportIdPath, service: ServiceDep
) -> ImportProgressPublic:
    """Where an import under ``import_id`` resumes: the first line of the first block of
    it the model has no record of (1 when it has none). Records last as long as the
    model's label window (``label_ttl``)."""
    line = await resume_line(service, name, import_id)
    return ImportProgressPublic(import_id=import_id, next_line=line, block=BLOCK)
