"""Settings: the one place that reads the environment (``COMMITTEE_*`` variables)."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


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
    max_json_depth: int = Field(
        default=64,
        ge=16,
        le=512,
        description="nesting of arrays and objects in a request body (422 beyond)",
    )
    max_headers: int = Field(
        default=100, ge=16, le=10_000, description="header fields of a request (431 beyond)"
    )
    max_header_bytes: int = Field(
        default=32 * 1024,
        ge=4 * 1024,
        le=1024 * 1024,
        description="bytes of a request's header names and values together (431 beyond)",
    )
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
    max_derived_experts: int = Field(
        default=4_096,
        ge=0,
        le=65_536,
        description="sub-experts one model's experts.combinations may add (subsets' averages)",
    )
    max_spec_depth: int = Field(default=8, ge=1, le=64, description="nesting of a learner spec")
    max_pending: int = Field(
        default=1_000_000, ge=1, description="predictions waiting for a label, per model"
    )
    max_answer_scores: int = Field(
        default=100_000, ge=1, description="items x labels in one predict answer"
    )
    max_log_entries: int = Field(
        default=10_000, ge=1, le=1_000_000, description="log entries one GET .../log answers"
    )
    max_import_lines: int = Field(
        default=10_000, ge=100, le=1_000_000, description="lines one POST .../log takes"
    )
    max_import_line_bytes: int = Field(
        default=64 * 1024, ge=1024, description="bytes of one line of a POST .../log"
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
    events_max_connections: int = Field(
        default=256, ge=1, description="event streams (GET .../events) open per worker process"
    )
    events_every_ms: int = Field(
        default=1_000, ge=10, le=60_000, description="an event stream's interval when not asked"
    )
    events_min_every_ms: int = Field(
        default=100, ge=10, le=60_000, description="the shortest interval an event stream takes"
    )
    events_heartbeat: float = Field(
        default=5.0, gt=0, le=300, description="seconds between an event stream's keep-alives"
    )
    events_max_seconds: float = Field(
        default=600.0,
        gt=0,
        description="seconds an event stream lasts before the server ends it (clients resume)",
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
    backtest_max_trials: int = Field(
        default=2_000_000,
        ge=1,
        description="log entries times learners one backtest may replay",
    )
    backtest_max_learners: int = Field(
        default=4, ge=1, le=64, description="candidate learners in one backtest"
    )
    max_challengers: int = Field(
        default=4,
        ge=0,
        le=64,
        description="shadow challengers one model may have (their learners count in "
        "max_learner_bytes with the model's)",
    )
    backtest_wait: float = Field(
        default=5.0,
        ge=0,
        le=600,
        description="seconds a backtest request waits for the result before answering "
        "202 with its job",
    )
    backtest_max_seconds: float = Field(
        default=3_600.0, gt=0, description="seconds a backtest may run before it is stopped"
    )
    backtest_jobs: int = Field(
        default=1, ge=1, le=64, description="backtests one worker process runs at once"
    )
    max_staleness_ms: float = Field(
        default=50.0, ge=0, description="a worker re-reads a model's log before predicting if older"
    )
    ack: Literal["applied", "fsync", "replicated"] = Field(
        default="applied",
        description="when a write is answered: once applied, once in the append-only file "
        "on disk, or once a replica has it",
    )
    ack_timeout_ms: int = Field(
        default=1_000,
        ge=1,
        le=60_000,
        description="how long a write waits for fsync or a replica before it is a 503",
    )
    compact_votes: bool = Field(
        default=True,
        description="keep an instance whose sub-experts each vote for every label as rows "
        "of votes, about half the bytes in Redis; off: in the form workers of releases "
        "before it read (while such workers share the Redis, as in a rolling upgrade)",
    )
    opentelemetry: bool = Field(
        default=False,
        description="FastAPI's own OpenTelemetry spans and metrics, for a process that "
        "configures OpenTelemetry providers (off: the service's /metrics only, and no "
        "per-request check of the providers)",
    )
    shutdown_timeout: int = Field(
        default=10,
        ge=1,
        le=3600,
        description="seconds a stopping worker waits for requests in flight, then for each "
        "step of its own shutdown",
    )
    warmup: bool = Field(
        default=True, description="compile the learners' kernels before /readyz answers 200"
    )
    kept_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=0,
        le=1 << 40,
        description="memory a worker holds the instances of its pending predictions in, "
        "to apply their labels without decoding them again (0: none held)",
    )
    gc_threshold: int = Field(
        default=50_000,
        ge=0,
        le=10_000_000,
        description="allocations between the garbage collector's young collections "
        "(0: Python's own, 700)",
    )
    # -- stream consumers (committee consume): see docs/streams.rst -------------------
    consume_batch: int = Field(
        default=256, ge=1, le=10_000, description="messages a consumer reads and applies at once"
    )
    consume_max_in_flight: int = Field(
        default=2_048,
        ge=1,
        le=1_000_000,
        description="messages one consumer holds read and not yet acknowledged",
    )
    consume_max_message_bytes: int = Field(
        default=1024 * 1024, ge=1024, description="one message's body (dead-lettered beyond)"
    )
    consume_claim_idle_ms: int = Field(
        default=30_000,
        ge=100,
        le=86_400_000,
        description="a message unacknowledged this long is delivered again (Redis: claimed "
        "from its consumer; NATS: the consumer's ack wait)",
    )
    consume_reply_maxlen: int = Field(
        default=1_000_000, ge=1, description="entries a Redis reply or dead-letter stream keeps"
    )
    consume_max_deliveries: int = Field(
        default=10,
        ge=1,
        le=10_000,
        description="deliveries of one message at most: one delivered more often is "
        "dead-lettered, not applied",
    )
    # -- security: see docs/security.rst ---------------------------------------------
    admin_key: str | None = Field(
        default=None,
        repr=False,
        min_length=32,
        max_length=256,
        pattern=r"^[\x21-\x7e]+$",
        description="an admin API key stored on start (id 'bootstrap'), for a first key",
    )
    insecure_no_auth: bool = Field(
        default=False, description="serve a non-loopback address while no API key exists"
    )
    allowed_hosts: Annotated[list[str] | None, NoDecode] = Field(
        default=None,
        description="Host header values served (comma-separated; '*' any); default: the "
        "loopback names when listening on loopback, else any",
    )
    allowed_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="origins whose pages may open a stream, beside the service's own",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="origins allowed cross-origin requests (CORS)"
    )
    read_requests_per_second: float = Field(default=1_000.0, gt=0)
    write_requests_per_second: float = Field(default=10_000.0, gt=0)
    admin_requests_per_second: float = Field(default=10_000.0, gt=0)
    write_trials_per_second: float = Field(default=100_000.0, gt=0)
    admin_trials_per_second: float = Field(default=100_000.0, gt=0)
    rate_burst: float = Field(
        default=2.0, gt=0, le=3600, description="seconds of its rate a key may spend at once"
    )
    max_models_per_key: int = Field(default=1_000, ge=1, description="models one key may make")
    audit_max: int = Field(default=100_000, ge=100, description="audit entries kept")
    tls_cert: Path | None = Field(
        default=None, description="PEM certificate chain: serve HTTPS (with tls_key)"
    )
    tls_key: Path | None = Field(default=None, description="PEM private key of tls_cert")
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "info"
    log_format: Literal["json", "text"] = Field(
        default="json", description="json: one object per line, for log pipelines"
    )

    # -- fan-out: the deployed experts the service asks itself (docs/fanout.rst) -------
    allowed_endpoints: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="host globs experts' endpoints may call, as host or host:port "
        "(comma-separated, e.g. '127.0.0.1:*,*.svc.cluster.local'); none by default",
    )
    endpoint_secrets: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        repr=False,
        description="request headers of the endpoints by secret name (JSON: name -> headers); "
        "an endpoint names one as headers_secret",
    )
    fanout_deadline_ms: int = Field(
        default=200, ge=1, le=60_000, description="an endpoint model's deadline unless it sets one"
    )
    fanout_max_deadline_ms: int = Field(
        default=10_000, ge=1, le=600_000, description="the longest deadline_ms a model may set"
    )
    fanout_max_answer_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="bytes of one endpoint's answer (longer: abstains)",
    )
    fanout_max_batch: int = Field(
        default=64, ge=1, le=10_000, description="rows one v2 request to an endpoint carries"
    )
    fanout_concurrency: int = Field(
        default=16, ge=1, le=10_000, description="requests in flight to one endpoint per worker"
    )
    fanout_breaker_failures: int = Field(
        default=5, ge=1, description="consecutive failures that open an endpoint's breaker"
    )
    fanout_breaker_cooldown_ms: int = Field(
        default=5_000, ge=1, description="an open breaker's wait before it lets a probe through"
    )

    # -- alerts: drift alerts' webhooks (docs/drift.rst) ---------------------------------
    alert_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="host globs a model's alert webhook_url may name, as allowed_endpoints "
        "reads them (e.g. 'hooks.example.com,127.0.0.1:*'); none by default",
    )
    alert_queue: int = Field(
        default=1_000, ge=1, le=1_000_000, description="alerts and webhooks a worker holds waiting"
    )
    alert_webhook_timeout_ms: int = Field(
        default=5_000, ge=1, le=600_000, description="one webhook call's time limit"
    )
    alert_webhook_tries: int = Field(
        default=5, ge=1, le=100, description="calls of a webhook before it is given up"
    )
    alert_webhook_backoff_ms: int = Field(
        default=500,
        ge=1,
        le=600_000,
        description="the wait before a webhook's second call, doubled before each next",
    )

    @field_validator("allowed_endpoints", "alert_allowed_hosts", mode="before")
    @classmethod
    def _endpoint_globs(cls, v: Any) -> Any:
        """A JSON list or a comma-separated string, as :meth:`_split` reads one."""
        return cls._split(v)

    @field_validator("allowed_hosts", "allowed_origins", "cors_origins", mode="before")
    @classmethod
    def _split(cls, v: Any) -> Any:
        """A JSON list or a comma-separated string."""
        if isinstance(v, str):
            text = v.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return v

    def loopback(self) -> bool:
        """Whether the service listens on loopback only."""
        if self.host in LOOPBACK_HOSTS:
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def hosts(self) -> list[str]:
        """The Host names served (without ports); ``["*"]`` for any."""
        if self.allowed_hosts is not None:
            return [h.lower() for h in self.allowed_hosts]
        return [*LOOPBACK_HOSTS, "[::1]"] if self.loopback() else ["*"]
