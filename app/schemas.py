"""Request and response bodies of the API (``XCreate`` / ``XPublic`` families).

Instances and learner specs are checked here for shape only; the input space and the
learner registry check them fully and name the offending field.
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from storage.keys import NAME_PATTERN, TRIAL_ID_PATTERN

Label = StrictStr | StrictInt
ModelName = Annotated[str, Field(pattern=NAME_PATTERN, examples=["fusion"])]
TrialId = Annotated[str, Field(pattern=TRIAL_ID_PATTERN)]
MAX_LABELS = 4096
MAX_TTL = 30 * 86400.0


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InputConfig(_In):
    """What clients send: plain attributes, sub-experts (deployed classifiers), or both."""

    attributes: dict[str, Any] | None = Field(
        None,
        description='{"n_features": d} | {"feature_names": [...]} | '
        '{"hashing": {"n_features": d, "seed": 0}}, with optional "constant_attribute"',
        examples=[{"n_features": 10}],
    )
    experts: dict[str, Any] | None = Field(
        None,
        description='{"expert_names": [...], "normalize": "raw" | "sum-to-one" | "rank" | '
        '"argmax", "threshold_experts": false, "split_classes": null}',
        examples=[{"expert_names": ["clf_a", "clf_b"], "normalize": "sum-to-one"}],
    )


class ModelCreate(_In):
    name: ModelName
    labels: list[Label] = Field(min_length=2, max_length=MAX_LABELS)
    input: InputConfig
    learner: dict[str, Any] = Field(
        description="a learner spec, see GET /v1/learners", examples=[{"kind": "committee"}]
    )
    label_ttl: float = Field(
        86400.0, gt=0, le=MAX_TTL, description="seconds a prediction waits for its label"
    )


class Counters(BaseModel):
    predictions: int = Field(description="tracked predictions made")
    labelled: int = Field(description="labels applied")
    learned: int = Field(description="trials learned with a known label")
    mistakes: int = Field(description="mistakes among applied trials (folded so far)")
    updates: int = Field(description="trials on which the learner changed (folded so far)")
    expired: int = Field(description="predictions whose label deadline passed unlabelled")
    late_labels: int = Field(description="labels refused because the deadline had passed")


class ModelPublic(BaseModel):
    name: str
    labels: list[Label]
    input: dict[str, Any] = Field(description="the input config as created (see InputConfig)")
    learner: dict[str, Any]
    label_ttl: float
    created: int = Field(description="Unix time of creation")
    version: int = Field(description="trials applied: the length of the model's log")
    folded: int = Field(description="trials whose outcomes the counters include")
    counters: Counters


class ModelsPublic(BaseModel):
    models: list[ModelPublic]


class Instance(_In):
    features: Any = Field(
        None, description="a dense list, or {feature: value} (index or name)", examples=[[1, 0]]
    )
    experts: dict[str, Any] | None = Field(
        None,
        description="{expert: vote}; a vote is {label: score}, a list of scores in label "
        "order, or a label",
    )


class PredictCreate(_In):
    instance: Instance
    trial_id: TrialId | None = Field(None, description="your id for this trial, else made up")
    track: bool = Field(True, description="false: only predict, expect no label")


class PredictPublic(BaseModel):
    trial_id: str | None
    label: Label
    scores: dict[str, float]
    model_version: int = Field(description="the log version of the hypothesis that predicted")


class LabelCreate(_In):
    trial_id: TrialId
    label: Label


class LabelPublic(BaseModel):
    trial_id: str | None
    predicted: Label
    label: Label
    mistake: bool
    updated: bool


class LearnCreate(_In):
    instance: Instance
    label: Label


class LearnPublic(BaseModel):
    predicted: Label
    label: Label
    mistake: bool
    updated: bool


class PredictBatchCreate(_In):
    items: list[PredictCreate] = Field(min_length=1)
    track: bool | None = Field(None, description="overrides each item's track")


class LabelBatchCreate(_In):
    items: list[LabelCreate] = Field(min_length=1)


class LearnBatchCreate(_In):
    items: list[LearnCreate] = Field(min_length=1)


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
    state: dict[str, Any]


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
    mistakes: int
    updates: int
    error_rate: float | None = Field(description="mistakes / folded trials")
    window: WindowPublic = Field(description="the most recent (about 1,000) folded trials")
    confusion: dict[str, dict[str, int]] = Field(description="true label -> predicted -> n")
    curve: list[tuple[int, int]] = Field(description="(trials, cumulative mistakes), sampled")
    internal: InternalPublic | None = Field(description="recycling's internal trials")
    learners: list[MemberPublic] | None = Field(description="V-Combine's basic learners")
    leader: str | None = Field(description="the V-Combine learner with fewest recent mistakes")
    experts: dict[str, float] | None = Field(description="sub-expert weights of the model")
    summary_version: int = Field(description="the version internal/learners/experts are at")
