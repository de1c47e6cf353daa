"""Settings: the one place that reads the environment (``COMMITTEE_*`` variables)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Service settings; each field is also the environment variable ``COMMITTEE_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="COMMITTEE_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    workers: int = Field(default=1, ge=1, le=256)
    redis_url: str | None = Field(
        default=None, description="Redis to use; when unset, `committee serve` starts a private one"
    )
    data_dir: Path = Field(
        default=Path("committee-data"),
        description="where the private Redis keeps its append-only file",
    )
    key_prefix: str = Field(default="committee", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    max_batch_items: int = Field(default=10_000, ge=1)
    max_models: int = Field(
        default=1_000, ge=1, description="models a worker keeps in memory at most"
    )
    # -- budgets: each refused with a 4xx that names it ------------------------------
    max_stored_models: int = Field(default=10_000, ge=1, description="models in all")
    max_labels: int = Field(default=1_024, ge=2, le=4_096, description="labels per model")
    max_label_length: int = Field(
        default=256, ge=1, le=256, description="characters of a label (or a trial's label)"
    )
    max_learner_bytes: int = Field(
        default=256 * 1024 * 1024,
        ge=1024,
        description="estimated bytes of one model's learner, nested learners included",
    )
    max_learners: int = Field(
        default=512, ge=1, description="learner objects one model's spec may build"
    )
    max_spec_depth: int = Field(default=8, ge=1, le=64, description="nesting of a learner spec")
    max_pending: int = Field(
        default=1_000_000, ge=1, description="predictions waiting for a label, per model"
    )
    max_answer_scores: int = Field(
        default=100_000, ge=1, description="items x labels in one predict answer"
    )
    ws_max_message_bytes: int = Field(
        default=1024 * 1024, ge=1024, description="one WebSocket message"
    )
    ws_max_queued: int = Field(
        default=1_024, ge=1, description="stream requests read ahead of their answers"
    )
    ws_max_connections: int = Field(
        default=1_000, ge=1, description="open streams per worker process"
    )
    ws_idle_timeout: float = Field(
        default=300.0, gt=0, description="seconds a stream may stay silent before it is closed"
    )
    max_connections: int = Field(
        default=4_096,
        ge=1,
        description="requests one worker serves at once (503 beyond; twice as many sockets)",
    )
    log_retain: int = Field(
        default=100_000,
        ge=0,
        description="trials kept in each model's log beyond the last snapshot",
    )
    snapshot_every: int = Field(
        default=10_000, ge=1, description="trials between state snapshots (more for large models)"
    )
    max_staleness_ms: float = Field(
        default=50.0, ge=0, description="a worker re-reads a model's log before predicting if older"
    )
    warmup: bool = Field(
        default=True, description="compile the learners' kernels before /readyz answers 200"
    )
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "info"
    log_format: Literal["json", "text"] = Field(
        default="json", description="json: one object per line, for log pipelines"
    )
