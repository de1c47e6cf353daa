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
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "info"
    log_format: Literal["json", "text"] = Field(
        default="json", description="json: one object per line, for log pipelines"
    )
