"""Every API call as a :class:`Call`: method, path, body, how to read the answer, and
whether it may be retried. Both clients run the same calls; only the I/O differs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import quote, urlencode

from pydantic import TypeAdapter

from committee_client.types import (
    Alerts,
    ApiKey,
    AuditEntry,
    BatchItem,
    Challengers,
    ImportProgress,
    Instance,
    Job,
    Label,
    Labelled,
    Learned,
    LearnerKind,
    LogImport,
    LogPage,
    Model,
    NewKey,
    Prediction,
    State,
    Stats,
)

R = TypeVar("R")


@dataclass(frozen=True)
class Call(Generic[R]):
    """One request and the reading of its answer; ``idempotent`` allows retrying it
    after any failure, ``retried`` False never retries it (a probe answers at once).
    ``key`` is sent as the ``Idempotency-Key`` header: the service answers every retry of
    a write with its first answer."""

    method: str
    path: str
    read: Callable[[Any], R]
    body: Any = None
    idempotent: bool = True
    retried: bool = True
    key: str | None = None
    #: a body sent as it is, of type ``media`` (NDJSON), instead of ``body`` as JSON
    raw: bytes | None = None
    media: str = "application/json"
    #: ``read`` takes the whole answer (``Answer``: its headers too) rather than its JSON
    whole: bool = False

    def headers(self) -> dict[str, str]:
        out = {} if self.body is None and self.raw is None else {"content-type": self.media}
        if self.key is not None:
            out["idempotency-key"] = self.key
        return out

    def content(self) -> bytes | None:
        if self.raw is not None:
            return self.raw
        return None if self.body is None else encode(self.body)


class Answer(Protocol):
    """What a call that reads the whole answer (``whole``) gets: an httpx response."""

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def content(self) -> bytes: ...


def _plain(o: Any) -> Any:
    """numpy arrays and scalars (anything with ``tolist``) as plain JSON values."""
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def encode(body: Any) -> bytes:
    """JSON for the service. NaN and infinities are sent as such, for the service to refuse
    with a 422 naming the field (a JSON null would silently mean "abstains")."""
    return json.dumps(body, default=_plain, separators=(",", ":")).encode()


def new_key() -> str:
    """An idempotency key for one write, the same for all its retries."""
    return uuid.uuid4().hex


def new_trial_id() -> str:
    """A trial id of the client's making, so a retried predict finds its first answer."""
    return uuid.uuid4().hex


def _model(name: str, *rest: str) -> str:
    return "/".join(["/v1/models", quote(name, safe=""), *rest])


def _reader(tp: Any) -> Callable[[Any], Any]:
    return TypeAdapter(tp).validate_python


_model_list = _reader(list[Model])
_learners = _reader(list[LearnerKind])
_predictions = _reader(list[BatchItem[Prediction]])
_labels = _reader(list[BatchItem[Labelled]])
_learned = _reader(list[BatchItem[Learned]])
_keys = _reader(list[ApiKey])
_audit = _reader(list[AuditEntry])


def _none(_: Any) -> None:
    return None


def alive() -> Call[dict[str, Any]]:
    return Call("GET", "/healthz", dict, retried=False)


def ready() -> Call[dict[str, Any]]:
    return Call("GET", "/readyz", dict, retried=False)


def create_model(
    name: str,
    labels: Sequence[Label],
    learner: Mapping[str, Any] | str,
    attributes: Mapping[str, Any] | None,
    experts: Mapping[str, Any] | None,
    label_ttl: float | None,
) -> Call[Model]:
    spec = {"kind": learner} if isinstance(learner, str) else dict(learner)
    source = {"attributes": attributes, "experts": experts}
    body: dict[str, Any] = {
        "name": name,
        "labels": list(labels),
        "input": {k: v for k, v in source.items() if v is not None},
        "learner": spec,
    }
    if label_ttl is not None:
        body["label_ttl"] = label_ttl
    return Call("POST", "/v1/models", Model.model_validate, body, key=new_key())


def list_models() -> Call[list[Model]]:
    return Call("GET", "/v1/models", lambda b: _model_list(b["models"]))


def get_model(name: str) -> Call[Model]:
    return Call("GET", _model(name), Model.model_validate)


def delete_model(name: str) -> Call[None]:
    # a second DELETE would answer 404 after the first succeeded: not retried blindly
    return Call("DELETE", _model(name), _none, key=new_key())


def learners() -> Call[list[LearnerKind]]:
    return Call("GET", "/v1/learners", _learners)


def get_state(name: str) -> Call[State]:
    return Call("GET", _model(name, "state"), State.model_validate)


def put_state(name: str, state: State | Mapping[str, Any]) -> Call[State]:
    doc = state.state if isinstance(state, State) else dict(state)
    # an import is a trial of the log: sent twice it would count twice
    body = {"state": doc}
    return Call("PUT", _model(name, "state"), State.model_validate, body, key=new_key())


def fork_model(
    name: str,
    source: str,
    version: int | None,
    learner: Mapping[str, Any] | str | None,
    label_ttl: float | None,
) -> Call[Model]:
    origin: dict[str, Any] = {"model": source}
    if version is not None:
        origin["version"] = version
    body: dict[str, Any] = {"name": name, "from": origin}
    if learner is not None:
        body["learner"] = {"kind": learner} if isinstance(learner, str) else dict(learner)
    if label_ttl is not None:
        body["label_ttl"] = label_ttl
    return Call("POST", "/v1/models", Model.model_validate, body, key=new_key())


def rollback(name: str, version: int) -> Call[Model]:
    body = {"version": version}
    return Call("POST", _model(name, "rollback"), Model.model_validate, body, key=new_key())


def backtest(
    name: str,
    learner: Mapping[str, Any] | str | Sequence[Mapping[str, Any] | str],
    from_version: int | None,
    points: int,
    wait: float | None,
) -> Call[Job]:
    one = isinstance(learner, str | Mapping)
    specs: list[Mapping[str, Any] | str] = (
        [learner] if isinstance(learner, str | Mapping) else list(learner)
    )
    plain = [{"kind": s} if isinstance(s, str) else dict(s) for s in specs]
    body: dict[str, Any] = {"learner": plain[0] if one else plain, "points": points}
    if from_version is not None:
        body["from_version"] = from_version
    if wait is not None:
        body["wait"] = wait
    # keyed: a retry after a lost answer follows the job the first request started
    return Call("POST", _model(name, "backtest"), Job.model_validate, body, key=new_key())


def job(job_id: str) -> Call[Job]:
    return Call("GET", f"/v1/jobs/{quote(job_id, safe='')}", Job.model_validate)


def cancel_job(job_id: str) -> Call[Job]:
    return Call("DELETE", f"/v1/jobs/{quote(job_id, safe='')}", Job.model_validate)


def attach_challenger(
    name: str, challenger: str, learner: Mapping[str, Any] | str
) -> Call[Challengers]:
    spec = {"kind": learner} if isinstance(learner, str) else dict(learner)
    body = {"name": challenger, "learner": spec}
    # keyed: a retry after a lost answer attaches it once, not a 422 (name taken)
    return Call(
        "POST", _model(name, "challengers"), Challengers.model_validate, body, key=new_key()
    )


def alerts(name: str) -> Call[Alerts]:
    return Call("GET", _model(name, "alerts"), Alerts.model_validate)


def configure_alerts(name: str, webhook_url: str | None, rollback: bool) -> Call[Alerts]:
    body = {"webhook_url": webhook_url, "rollback": rollback}
    return Call("PUT", _model(name, "alerts"), Alerts.model_validate, body)


def challengers(name: str) -> Call[Challengers]:
    return Call("GET", _model(name, "challengers"), Challengers.model_validate)


def promote_challenger(name: str, challenger: str) -> Call[Challengers]:
    path = _model(name, "challengers", quote(challenger, safe=""), "promote")
    return Call("POST", path, Challengers.model_validate, key=new_key())


def retire_challenger(name: str, challenger: str) -> Call[None]:
    path = _model(name, "challengers", quote(challenger, safe=""))
    return Call("DELETE", path, _none, key=new_key())


def versions(name: str) -> Call[dict[str, Any]]:
    return Call("GET", _model(name, "versions"), dict)


def change_experts(
    name: str, add: Sequence[str] | None, retire: Sequence[str] | None
) -> Call[Model]:
    body = {k: list(v) for k, v in (("add", add), ("retire", retire)) if v}
    # keyed: a retry after a lost answer gets the first answer, not a 422 (name taken)
    return Call("POST", _model(name, "experts"), Model.model_validate, body, key=new_key())


def add_features(name: str, add: Sequence[str]) -> Call[Model]:
    body = {"add": list(add)}
    return Call("POST", _model(name, "features"), Model.model_validate, body, key=new_key())


def add_labels(name: str, add: Sequence[Label]) -> Call[Model]:
    body = {"add": list(add)}
    return Call("POST", _model(name, "labels"), Model.model_validate, body, key=new_key())


def stats(name: str) -> Call[Stats]:
    return Call("GET", _model(name, "stats"), Stats.model_validate)


def predict_item(
    instance: Instance,
    trial_id: str | None,
    track: bool,
    explain: bool = False,
    explain_top: int | None = None,
) -> dict[str, Any]:
    item: dict[str, Any] = {"instance": dict(instance), "track": track}
    if track:  # an untracked predict stores nothing, and needs no id to be retried
        item["trial_id"] = trial_id or new_trial_id()
    elif trial_id is not None:
        item["trial_id"] = trial_id
    if explain:
        item["explain"] = True
        if explain_top is not None:
            item["explain_top"] = explain_top
    return item


def predict(
    name: str,
    instance: Instance,
    trial_id: str | None,
    track: bool,
    explain: bool = False,
    explain_top: int | None = None,
) -> Call[Prediction]:
    body = predict_item(instance, trial_id, track, explain, explain_top)
    return Call("POST", _model(name, "predict"), Prediction.model_validate, body)


def label(name: str, trial_id: str, label: Label) -> Call[Labelled]:
    body = {"trial_id": trial_id, "label": label}
    return Call("POST", _model(name, "label"), Labelled.model_validate, body)


def learn(name: str, instance: Instance, label: Label) -> Call[Learned]:
    body = {"instance": dict(instance), "label": label}
    return Call("POST", _model(name, "learn"), Learned.model_validate, body, key=new_key())


def predict_batch(
    name: str,
    instances: Iterable[Instance],
    trial_ids: Iterable[str | None] | None,
    track: bool,
    explain: bool = False,
    explain_top: int | None = None,
) -> Call[list[BatchItem[Prediction]]]:
    xs = list(instances)
    ids = [None] * len(xs) if trial_ids is None else list(trial_ids)
    if len(ids) != len(xs):
        raise ValueError(f"{len(ids)} trial ids for {len(xs)} instances: expected one each")
    items = [predict_item(x, t, track, explain, explain_top) for x, t in zip(xs, ids, strict=True)]
    path = _model(name, "predict", "batch")
    return Call("POST", path, lambda b: _predictions(b["items"]), {"items": items})


def label_batch(name: str, labels: Iterable[tuple[str, Label]]) -> Call[list[BatchItem[Labelled]]]:
    items = [{"trial_id": t, "label": y} for t, y in labels]
    path = _model(name, "label", "batch")
    return Call("POST", path, lambda b: _labels(b["items"]), {"items": items})


def learn_batch(
    name: str, items: Iterable[tuple[Instance, Label]]
) -> Call[list[BatchItem[Learned]]]:
    body = {"items": [{"instance": dict(x), "label": y} for x, y in items]}
    path = _model(name, "learn", "batch")
    return Call("POST", path, lambda b: _learned(b["items"]), body, key=new_key())


def create_key(
    scope: str, models: str, name: str, limits: Mapping[str, float] | None
) -> Call[NewKey]:
    body: dict[str, Any] = {"scope": scope, "models": models, "name": name}
    if limits:
        body["limits"] = dict(limits)
    # sent twice, it would make two keys: retried only when it cannot have arrived
    return Call("POST", "/v1/keys", NewKey.model_validate, body, idempotent=False)


def list_keys() -> Call[list[ApiKey]]:
    return Call("GET", "/v1/keys", lambda b: _keys(b["keys"]))


def revoke_key(key_id: str) -> Call[None]:
    # a second DELETE would answer 404 after the first succeeded: not retried blindly
    return Call("DELETE", f"/v1/keys/{quote(key_id, safe='')}", _none, idempotent=False)


def audit(limit: int) -> Call[list[AuditEntry]]:
    return Call("GET", f"/v1/audit?limit={int(limit)}", lambda b: _audit(b["entries"]))


NDJSON = "application/x-ndjson"
#: lines per block of an import: a request starts a block, and holds whole blocks except
#: the import's last (the service's ``app.service.log_import.BLOCK``)
IMPORT_BLOCK = 100


def _page(r: Answer) -> LogPage:
    lines = r.content.split(b"\n")
    return LogPage(
        lines=[line for line in lines if line],
        next_from=int(r.headers["committee-next-from"]),
        version=int(r.headers["committee-log-version"]),
    )


def log_page(name: str, after: int, limit: int | None) -> Call[LogPage]:
    query = urlencode({"from": int(after), **({} if limit is None else {"limit": int(limit)})})
    return Call("GET", f"{_model(name, 'log')}?{query}", _page, whole=True)


def nothing_imported(import_id: str, first_line: int, model_version: int) -> LogImport:
    """The outcome of an import that had no lines to send."""
    return LogImport(
        import_id=import_id,
        first_line=first_line,
        lines=0,
        applied=0,
        already=0,
        failed=0,
        errors=[],
        next_line=first_line,
        model_version=model_version,
    )


def import_lines(name: str, body: bytes, import_id: str, first_line: int) -> Call[LogImport]:
    """One request of an import: its blocks are appended at most once, so a retry is safe."""
    query = urlencode({"import_id": import_id, "first_line": int(first_line)})
    path = f"{_model(name, 'log')}?{query}"
    return Call("POST", path, LogImport.model_validate, raw=body, media=NDJSON)


def import_progress(name: str, import_id: str) -> Call[ImportProgress]:
    path = _model(name, "log", "imports", quote(import_id, safe=""))
    return Call("GET", path, ImportProgress.model_validate)


def ndjson_line(line: Mapping[str, Any] | str | bytes) -> bytes:
    """One line of an import: a document as JSON, text as it is (without its newline)."""
    if isinstance(line, bytes):
        return line.rstrip(b"\r\n")
    if isinstance(line, str):
        return line.rstrip("\r\n").encode()
    return encode(line)


def import_requests(
    lines: Iterable[Mapping[str, Any] | str | bytes],
    first_line: int,
    lines_per_request: int,
    bytes_per_request: int,
) -> Iterator[tuple[int, bytes]]:
    """The bodies an import sends, with their first line's number: whole blocks of
    :data:`IMPORT_BLOCK` lines, at most ``lines_per_request`` lines (a multiple of it)
    and, unless a block alone is larger, ``bytes_per_request`` bytes."""
    if (first_line - 1) % IMPORT_BLOCK:
        raise ValueError(f"first_line {first_line}: expected 1 + a multiple of {IMPORT_BLOCK}")
    if lines_per_request < IMPORT_BLOCK or lines_per_request % IMPORT_BLOCK:
        raise ValueError(
            f"lines_per_request {lines_per_request}: expected a multiple of {IMPORT_BLOCK}"
        )
    at, body, n = first_line, bytearray(), 0  # the request being made, of n lines
    block, m = bytearray(), 0  # the block being read, of m lines

    def full() -> bool:  # whether the block does not fit in the request too
        return bool(body) and (
            n + m > lines_per_request or len(body) + len(block) > bytes_per_request
        )

    for line in lines:
        block += ndjson_line(line) + b"\n"
        m += 1
        if m < IMPORT_BLOCK:
            continue
        if full():
            yield at, bytes(body)
            at, body, n = at + n, bytearray(), 0
        body += block
        n += m
        block, m = bytearray(), 0
    if full():
        yield at, bytes(body)
        at, body = at + n, bytearray()
    body += block
    if body:
        yield at, bytes(body)
