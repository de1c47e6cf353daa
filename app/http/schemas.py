"""Request and response bodies of the API (``XCreate`` / ``XPublic`` families); the trial
calls' request bodies are in :mod:`app.http.bodies`.

Instances and learner specs are checked here for shape only; the input space and the
learner registry check them fully and name the offending field.
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from app.core.names import Name
from app.service.scorecards import SPARK_BLOCK, WINDOW
from app.service.summary import MAX_EXPERTS

MAX_LABEL_LENGTH = 256
INT64 = 2**63


EXACT_FLOATS = 2**53  # the integers a float holds exactly, and no others beside


def _integral(v: Any) -> Any:
    """``v`` as an int when it is a float with no fraction (JSON Schema's integers include
    2.0), else as it came (a strict int refuses it: a boolean, a string, 2.5). Only below
    2**53: a float beyond stands for many integers (an integer beyond 64 bits, which a
    body's reader gives as a float, among them)."""
    if type(v) is float and v.is_integer() and abs(v) <= EXACT_FLOATS:
        return int(v)
    return v


#: after ``Field(strict=True, <bounds>)``: an integer as JSON Schema has it, 2 or 2.0,
#: never true or "2" (after the bounds, so that the document states them)
AS_INT = BeforeValidator(_integral)
#: a number: an integer or a float, never true or "2"
JsonNumber = Annotated[float, Field(strict=True)]
Label = (
    Annotated[str, Field(strict=True, max_length=MAX_LABEL_LENGTH)]
    | Annotated[int, Field(strict=True, ge=-INT64, lt=INT64), AS_INT]
)


def up_to_pattern(most: int) -> str:
    """A regular expression of the decimal numbers 0 to ``most``, without leading zeros:
    the shorter numbers, then those as long as ``most`` that are smaller at some digit."""
    top = str(most)
    parts = ["0"] if len(top) == 1 else ["0", rf"[1-9]\d{{0,{len(top) - 2}}}"]
    for i, digit in enumerate(top):
        low = "1" if i == 0 else "0"
        if digit > low:
            parts.append(rf"{top[:i]}[{low}-{int(digit) - 1}]\d{{{len(top) - i - 1}}}")
    parts.append(top)
    return "(?:" + "|".join(parts) + ")"


ModelName = Annotated[Name, Field(examples=["pets"])]
MAX_LABELS = 4096
MAX_TTL = 30 * 86400.0
STORED_INTS = (-(2**63), 2**64 - 1)  # the integers the store keeps (orjson's range)
# An example model with two attributes, which the examples below fit (the OpenAPI
# contract test creates it).
EXAMPLE_MODEL: dict[str, Any] = {
    "name": "pets",
    "labels": ["cat", "dog", "bird"],
    "input": {
        "attributes": {"n_features": 2},
        "experts": {"expert_names": ["cnn", "svm", "knn"], "normalize": "sum-to-one"},
    },
    "learner": {"kind": "committee", "alpha": 1.5},
}
EXAMPLE_INSTANCE: dict[str, Any] = {
    "features": [1, 0],
    "experts": {"cnn": {"cat": 0.7, "dog": 0.3}, "svm": "dog", "knn": [0.2, 0.5, 0.3]},
}


def _storable(value: Any) -> Any:
    """``value`` when every integer in it is one the store keeps."""
    low, high = STORED_INTS
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, int) and not low <= v <= high:
            raise ValueError(f"an integer beyond 64 bits: expected {low} to {high}")
    return value


# a JSON object kept as it is (a learner spec, an input config, a learner state)
Document = Annotated[dict[str, Any], AfterValidator(_storable)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InputConfig(_In):
    """What clients send: plain attributes, sub-experts (deployed classifiers), or both."""

    attributes: Document | None = Field(
        None,
        description='{"n_features": d} | {"feature_names": [...]} | '
        '{"hashing": {"n_features": d, "seed": 0}}, with optional "constant_attribute"',
        examples=[EXAMPLE_MODEL["input"]["attributes"]],
    )
    experts: Document | None = Field(
        None,
        description='{"expert_names": [...], "normalize": "raw" | "sum-to-one" | "rank" | '
        '"argmax" or a list of them (one sub-expert each), "combinations": null | '
        '{"size": k, "by": "score" | "rank" | ["score", "rank"]}, "threshold_experts": false, '
        '"split_classes": null, "deadline_ms": 200, "endpoints": {expert: {"url": ..., '
        '"protocol": "v2" | "json", "model": ..., "output": ..., "timeout_ms": ..., '
        '"headers_secret": ..., "classes": [...]}}} (endpoints: docs/fanout.rst)',
        examples=[EXAMPLE_MODEL["input"]["experts"]],
    )
    generations: list[list[int]] | None = Field(
        None,
        max_length=10_000,
        description="[experts, features, labels] at creation and after each change that "
        "added some, as a changed model's input shows it (kept, so that a copy numbers "
        "its inputs alike)",
    )


#: the most names one change adds or retires
MAX_CHANGE_NAMES = 10_000
InputName = Annotated[str, Field(strict=True, min_length=1, max_length=MAX_LABEL_LENGTH)]


class ExpertsChange(_In):
    """Experts to add (new names, after the others) and to retire (they vote no more)."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"add": ["vit"], "retire": ["svm"]}]}
    )

    add: list[InputName] | None = Field(None, min_length=1, max_length=MAX_CHANGE_NAMES)
    retire: list[InputName] | None = Field(None, min_length=1, max_length=MAX_CHANGE_NAMES)
    endpoints: dict[InputName, Document] | None = Field(
        None,
        min_length=1,
        max_length=MAX_CHANGE_NAMES,
        description="endpoints of experts added here, by name, as in input.experts.endpoints "
        "(checked as when a model is made)",
    )


class FeaturesChange(_In):
    """Named features to add, after the others."""

    add: list[InputName] = Field(min_length=1, max_length=MAX_CHANGE_NAMES)


class LabelsChange(_In):
    """Labels to add, after the others."""

    add: list[Label] = Field(min_length=1, max_length=MAX_LABELS)


class ModelCreate(_In):
    model_config = ConfigDict(json_schema_extra={"examples": [EXAMPLE_MODEL]})

    name: ModelName
    labels: list[Label] = Field(min_length=2, max_length=MAX_LABELS)
    input: InputConfig
    learner: Document = Field(
        description="a learner spec, see GET /v1/learners", examples=[{"kind": "committee"}]
    )
    label_ttl: JsonNumber = Field(
        86400.0, gt=0, le=MAX_TTL, description="seconds a prediction waits for its label"
    )
    max_active: Annotated[int, Field(strict=True, ge=1, le=2**26), AS_INT] | None = Field(
        None,
        description="the most non-zero values one instance may have, as the learner reads it "
        "(attributes, or sub-expert votes): learners that keep instances (recycling, "
        "V-Combine) are budgeted for it. Null: the whole input size",
    )


class Rollback(_In):
    version: int = Field(
        strict=True,
        ge=0,
        le=2**53,
        description="the version whose state to go back to (see .../versions)",
    )


class ForkSource(_In):
    model: ModelName
    version: int | None = Field(
        None,
        strict=True,
        ge=0,
        le=2**53,
        description="the source's version to start from (null: its current one); any from "
        "its snapshot on (see GET /v1/models/{name}/versions)",
    )


class ModelFork(_In):
    """A model made from another one's state at a version: its labels, input and (unless
    ``learner`` is given) learner state. With another ``learner``, the new learner is
    trained by replaying the source's log up to that version instead."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={"examples": [{"name": "pets-2", "from": {"model": "pets"}}]},
    )

    name: ModelName
    from_: ForkSource = Field(alias="from")
    learner: Document | None = Field(
        None, description="another learner spec, trained on the source's log (null: the source's)"
    )
    label_ttl: JsonNumber | None = Field(None, gt=0, le=MAX_TTL, description="null: the source's")
    max_active: Annotated[int, Field(strict=True, ge=1, le=2**26), AS_INT] | None = Field(
        None, description="null: the source's"
    )


class BacktestCreate(_In):
    """Candidate learners to replay over the model's log, beside the model itself."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"learner": [{"kind": "vr-combine"}, {"kind": "committee", "alpha": 1.2}]}]
        },
    )

    learner: Document | list[Document] = Field(
        description="a learner spec (see GET /v1/learners), or a list of them (at most "
        "backtest_max_learners)"
    )
    from_version: int | None = Field(
        None,
        strict=True,
        ge=0,
        le=2**53,
        description="count mistakes on the trials after this version (null: the earliest "
        "version the model can be rebuilt at; see .../versions); candidates learn, "
        "uncounted, from the earliest version the model can be rebuilt at before it",
    )
    points: int = Field(
        100, strict=True, ge=2, le=1_000, description="points on each mistake curve, at most"
    )
    wait: float | None = Field(
        None,
        strict=True,
        ge=0,
        le=600,
        description="seconds to wait for the result before answering 202 with the running "
        "job (null: the backtest_wait setting)",
    )


class BacktestRun(BaseModel):
    learner: dict[str, Any]
    trials: int = Field(description="trials counted: labelled trials after from_version")
    mistakes: int
    error_rate: float | None = Field(description="mistakes / trials")
    late: int = Field(
        description="labelled predictions judged at replay rather than at the version that "
        "served them (served before the replay began, or far back)"
    )
    curve: list[tuple[int, int]] = Field(
        description="(log version, mistakes since from_version), sampled"
    )
    stopped: dict[str, Any] | None = Field(
        description="where and why this learner stopped early ({version, reason}); null: it "
        "replayed to the end"
    )


class BacktestResult(BaseModel):
    from_version: int
    to_version: int = Field(description="the model's version when the backtest began")
    trained_from: int = Field(description="the version the candidates started untrained at")
    resets: list[int] = Field(
        description="versions of state imports and rollbacks in the replayed log: the model "
        "was reset there, the candidates learned on"
    )
    model: BacktestRun = Field(description="the model itself, as it was on these trials")
    candidates: list[BacktestRun]


class JobProgress(BaseModel):
    done: int = Field(description="log entries replayed")
    total: int


class JobPublic(BaseModel):
    """A job: a backtest running in the background, or its result."""

    id: str
    kind: Literal["backtest"]
    model: str
    status: Literal["running", "done", "failed", "cancelled"]
    created: int = Field(description="Unix time in milliseconds")
    updated: int = Field(description="Unix time in milliseconds of the job's last report")
    seconds: float = Field(description="seconds it has run")
    progress: JobProgress
    request: dict[str, Any]
    result: BacktestResult | None = Field(
        description="once it ended (partial when it failed or was cancelled)"
    )
    error: str | None


class Counters(BaseModel):
    predictions: int = Field(description="tracked predictions made")
    labelled: int = Field(description="labels applied")
    learned: int = Field(description="trials learned with a known label")
    mistakes: int = Field(description="mistakes among applied trials (folded so far)")
    updates: int = Field(description="trials on which the learner changed (folded so far)")
    expired: int = Field(description="predictions whose label deadline passed unlabelled")
    late_labels: int = Field(description="labels refused because the deadline had passed")
    quarantined: int = Field(
        0, description="log entries no worker could replay, skipped alike by all (folded so far)"
    )
    refused: int = Field(
        0, description="trials whose update the learner refused whole (folded so far)"
    )


class ModelPublic(BaseModel):
    name: str
    labels: list[Label]
    input: dict[str, Any] = Field(
        description="the input config as it is now (see InputConfig): as created, with the "
        "experts, features and labels added since, and the experts retired"
    )
    learner: dict[str, Any]
    label_ttl: float
    max_active: int | None = None
    created: int = Field(description="Unix time of creation")
    version: int = Field(description="trials applied: the length of the model's log")
    folded: int = Field(description="trials whose outcomes the counters include")
    counters: Counters


class ModelsPublic(BaseModel):
    models: list[ModelPublic]


class ContributionPublic(BaseModel):
    input: str = Field(description="the input: feature:<name>, hash:<i>, expert:<name>, ...")
    value: float = Field(description="its part of the label's score")


class LabelExplanationPublic(BaseModel):
    """One label's score as constant + the listed contributions + rest."""

    constant: float = Field(description="the part of no input: a threshold, a bias")
    contributions: list[ContributionPublic] = Field(
        description="the explain_top inputs of largest part, by absolute value"
    )
    rest: float = Field(description="the sum of the other inputs' parts")


class ExplanationPublic(BaseModel):
    """Each input's part of each label's score (docs/using.rst, Explanations)."""

    kind: str = Field(description="the learner kind explained")
    labels: dict[str, LabelExplanationPublic]


class PredictPublic(BaseModel):
    trial_id: str | None
    label: Label
    scores: dict[str, float]
    model_version: int = Field(description="the log version of the hypothesis that predicted")
    abstained: list[str] | None = Field(
        None,
        description="with inputs: the experts that gave no vote (late, failed or malformed "
        "answers, and experts neither asked nor posted)",
    )
    explanation: ExplanationPublic | None = Field(
        None,
        description="with explain: each input's part of each label's score; null for a "
        "retried trial answered as first served by an earlier version",
    )


class LabelPublic(BaseModel):
    trial_id: str | None
    predicted: Label
    label: Label
    mistake: bool
    updated: bool


class LearnPublic(BaseModel):
    predicted: Label
    label: Label
    mistake: bool
    updated: bool


class ItemError(BaseModel):
    status: int
    message: str
    field: str | None = None


T = TypeVar("T")


class BatchItem(BaseModel, Generic[T]):
    """One item's result, or its error (the other items are unaffected)."""

    result: T | None = None
    error: ItemError | None = None


class BatchPublic(BaseModel, Generic[T]):
    items: list[BatchItem[T]]


class StatePublic(BaseModel):
    model_version: int
    state: dict[str, Any]


class StateUpdate(_In):
    state: Document


class LearnerParameter(BaseModel):
    name: str
    required: bool
    default: Any
    expected: str
    context: bool


class LearnerKind(BaseModel):
    kind: str
    summary: str
    input: str
    parameters: list[LearnerParameter]


class WindowPublic(BaseModel):
    trials: int
    mistakes: int
    error_rate: float | None


class InternalPublic(BaseModel):
    trials: int
    mistakes: int
    updates: int


class MemberPublic(BaseModel):
    name: str
    mistakes: int
    recent_mistakes: int


class ScorecardPublic(BaseModel):
    """One classifier of a fusion model, judged on the trials it voted in (its top vote:
    the label it scored highest, ties to the first label)."""

    expert: str = Field(description="the classifier, as the model's input names it")
    retired: bool
    trials: int = Field(description="trials it voted in")
    mistakes: int = Field(description="trials whose label was not its top vote")
    error_rate: float | None
    recent: WindowPublic = Field(description=f"its last (at most {WINDOW:,}) trials")
    confusion: dict[str, dict[str, int]] = Field(description="true label -> its top vote -> n")
    agreed: int = Field(description="trials whose served prediction was its top vote")
    agreement: float | None = Field(description="agreed / trials: its share of the decision")
    weight: float | None = Field(
        description="its own sub-experts' weight in the learner (subsets' averages not "
        "counted); null when the learner has no weights"
    )
    spark: list[float] = Field(
        description=f"error rate of each {SPARK_BLOCK} of its recent trials in turn, oldest first"
    )


class ChangePublic(BaseModel):
    version: int
    what: str


class EndpointPublic(BaseModel):
    expert: str
    protocol: str | None = Field(description="v2 or json; null when it cannot be called")
    url: str | None = Field(description="the URL posted to")
    breaker: Literal["closed", "half-open", "open"] = Field(
        description="its circuit breaker: closed (called), open (not called), half-open "
        "(a probe in flight)"
    )
    failures: int = Field(description="failed answers in a row")
    recent: dict[str, int] = Field(
        description="the outcomes of its latest answers (ok, timeout, error, malformed, late, "
        "open, refused), counted"
    )
    refused: str | None = Field(description="why it is not called (allowed hosts changed)")


class EndpointsPublic(BaseModel):
    """The experts' endpoints as the worker that answers sees them (each worker has its
    own breakers and counts)."""

    deadline_ms: int | None
    endpoints: list[EndpointPublic]


class StatsPublic(BaseModel):
    """A model's statistics, read without loading its learner."""

    name: str
    version: int = Field(description="trials applied")
    folded: int = Field(description="trials counted in mistakes, updates and confusion")
    predictions: int
    labelled: int
    learned: int
    pending: int = Field(description="predictions waiting for their label")
    expired: int
    late_labels: int
    quarantined: int = Field(description="log entries no worker could replay, skipped")
    refused: int = Field(description="trials whose update the learner refused whole")
    mistakes: int
    updates: int
    error_rate: float | None = Field(
        description="mistakes / judged trials (the confusion counts' sum: folded trials "
        "less changes of the input and quarantined entries)"
    )
    window: WindowPublic = Field(description="the most recent (about 1,000) folded trials")
    confusion: dict[str, dict[str, int]] = Field(description="true label -> predicted -> n")
    curve: list[tuple[int, int]] = Field(description="(trials, cumulative mistakes), sampled")
    changes: list[ChangePublic] = Field(
        description="the latest changes of the model's input and imports of its state, "
        "at the log version of each (a dashboard marks them on the curve)"
    )
    internal: InternalPublic | None = Field(description="recycling's internal trials")
    learners: list[MemberPublic] | None = Field(description="V-Combine's basic learners")
    leader: str | None = Field(description="the V-Combine learner with fewest recent mistakes")
    experts: dict[str, float] | None = Field(description="sub-expert weights of the model")
    scorecards: list[ScorecardPublic] | None = Field(
        None,
        description="each classifier's scorecard (models whose input has experts; at most "
        f"{MAX_EXPERTS}, those that voted in the most trials), in the input's order",
    )
    summary_version: int = Field(
        description="the version internal/learners/experts/scorecards are at"
    )


# -- API keys and the audit log -------------------------------------------------------

GLOB_PATTERN = r"^[A-Za-z0-9_.*?\[\]!-]{1,64}$"
_U64 = up_to_pattern(2**64 - 1)
#: an entry id of the audit stream, ``<ms>-<n>``: two 64-bit numbers (a Redis stream's)
AUDIT_ID = rf"^{_U64}-{_U64}$"


class KeyLimits(_In):
    """A key's own limits; each one left out is its scope's default."""

    requests_per_second: JsonNumber | None = Field(None, gt=0, le=1e9)
    trials_per_second: JsonNumber | None = Field(None, gt=0, le=1e9)
    burst: JsonNumber | None = Field(None, gt=0, le=3600, description="seconds of its rate at once")
    max_models: Annotated[int, Field(strict=True, ge=1, le=10**9), AS_INT] | None = Field(
        None, description="models it may make"
    )


class KeyCreate(_In):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"scope": "write", "models": "acme-*", "name": "acme"}]},
    )

    scope: Literal["read", "write", "admin"]
    models: str = Field(
        "*", pattern=GLOB_PATTERN, description="glob of the model names the key reaches"
    )
    name: str = Field("", strict=True, max_length=100, description="what the key is for")
    limits: KeyLimits | None = None


class KeyPublic(BaseModel):
    id: str
    scope: str
    models: str
    name: str
    created: int = Field(description="Unix time of creation")
    limits: dict[str, float] = Field(description="the key's own limits")


class KeyCreated(KeyPublic):
    key: str = Field(description="the secret: shown once, in this answer only")


class KeysPublic(BaseModel):
    keys: list[KeyPublic]


class AuditEntryPublic(BaseModel):
    id: str = Field(description="the entry's id in the audit stream; pass it as `before`")
    at: int = Field(description="Unix time in milliseconds")
    key_id: str | None
    key_name: str
    action: str
    model: str | None
    status: int = Field(description="the HTTP status the action was answered with")
    detail: str


class AuditPublic(BaseModel):
    entries: list[AuditEntryPublic]


class ChallengerCreate(_In):
    """A learner to attach as a shadow challenger of the model."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"name": "vr", "learner": {"kind": "vr-combine"}}]},
    )

    name: Annotated[Name, Field(examples=["vr"])] = Field(description="the challenger's name")
    learner: Document = Field(description="a learner spec (see GET /v1/learners)")


class ChallengerRef(_In):
    """A challenger of the model, by name (the stream's promote and retire)."""

    challenger: Annotated[Name, Field(examples=["vr"])]


class ChallengerPublic(BaseModel):
    """A challenger and its figures, beside the model's learner's on the same trials."""

    name: str
    learner: dict[str, Any]
    attached: int = Field(description="the log version it was attached at")
    trials: int = Field(description="the trials it was judged on since")
    mistakes: int
    error_rate: float | None = Field(description="mistakes / trials (null before a trial)")
    live_mistakes: int = Field(
        description="the model's learner's mistakes on the same trials (by the prediction "
        "served, for a labelled one)"
    )
    live_error_rate: float | None
    live_log_mistakes: int = Field(
        description="the model's learner's mistakes on the same trials judged as the "
        "challenger is: by its prediction as the trial enters the log"
    )
    skipped: int = Field(description="trials its learner could not learn (a fault of its own)")
    curve: list[list[int]] = Field(
        description="[trials, mistakes, live_mistakes] at evenly spaced trials (at most 256)"
    )


class ChallengersPublic(BaseModel):
    """A model's challengers at its latest version."""

    model: str
    version: int
    learner: dict[str, Any] = Field(description="the model's learner")
    challengers: list[ChallengerPublic]


class AlertsConfig(_In):
    """What a model's alerts do beside being recorded (docs/drift.rst)."""

    webhook_url: str | None = Field(
        None,
        max_length=2048,
        description="POSTed each alert as JSON (retried with back-off, redirects not "
        "followed); its host must match one of the operator's alert_allowed_hosts",
        examples=["https://hooks.example.com/committee"],
    )
    rollback: bool = Field(
        False,
        description="on a rise of the model's error rate, roll it back to the version before "
        "the alert's recent trials (since - 1)",
    )


class AlertPublic(BaseModel):
    """An alert: where a stream's detector fired, and the error rates around it."""

    seq: int = Field(description="the log entry at which the detector fired")
    kind: Literal["drift"]
    what: str = Field(description="the stream: model, or expert:<sub-expert>")
    detector: str
    before: float | None = Field(
        description="the error rate since the stream's last alert (or its start), before "
        "its recent trials (null when there were none)"
    )
    after: float = Field(description="the error rate of its recent trials (at most 256)")
    since: int | None = Field(description="the log seq of the first of those recent trials")
    trials: int = Field(description="the stream's trials since its last alert")


class DetectorPublic(BaseModel):
    kind: str
    params: dict[str, Any]
    delay: int = Field(
        description="the documented delay: trials to an alarm after the error rate steps "
        "from 0.1 to 0.4 (models.drift.STEP_DELAY)"
    )


class BoundBestPublic(BaseModel):
    expert: str = Field(description="the sub-expert of the least bound so far in the run")
    mistakes: int = Field(description="its mistakes in the run (top vote not the label)")
    loss: float = Field(description="its loss: the mistakes, plus brier x its half Brier scores")


class BoundPublic(BaseModel):
    """The bound watch: the learner's mistakes against its proven bound relative to the
    best sub-expert, over the run since the learner last changed in the log."""

    learner: dict[str, Any] = Field(description="the learner's kind and parameters")
    since: int | None = Field(description="the log seq of the run's first trial")
    trials: int
    mistakes: int = Field(description="the learner's own mistakes in the run")
    bound: float | None = Field(description="the bound on them now (null: suspended)")
    best: BoundBestPublic | None
    over: bool = Field(description="over the bound since its last alert")
    suspended: dict[str, Any] | None = Field(
        description="{seq, why}: a trial broke the bound's premise; null: it holds"
    )
    alerts: list[dict[str, Any]] = Field(description="the latest, oldest first")


class AlertsPublic(BaseModel):
    """A model's alerts at its latest version (the same on every worker), with its watch's
    figures and its alert config."""

    model: str
    version: int
    config: AlertsConfig | None = Field(description="null: none set")
    detector: DetectorPublic
    error_rate: float | None = Field(description="the model's error rate, its recent trials")
    experts: dict[str, float | None] = Field(
        description="each watched sub-expert's error rate, its recent trials"
    )
    alerts: list[AlertPublic] = Field(description="the latest, oldest first")
    bound: BoundPublic | None = Field(
        None, description="the bound watch, for a learner with a bound (docs/drift.rst)"
    )
