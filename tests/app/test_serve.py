"""``committee serve``: settings resolution, the private Redis's lifetime, and what workers inherit.

uvicorn is replaced by a recorder here; the HTTP app itself is tested in ``tests/app``.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import redis

from app.cli import main as cli
from app.cli import serve


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Calls of ``uvicorn.run``, each with the environment and Redis state seen at the time."""
    monkeypatch.setattr(
        os, "environ", {k: v for k, v in os.environ.items() if "COMMITTEE" not in k}
    )
    calls: list[dict[str, Any]] = []

    def record(app: str, **kwargs: Any) -> None:
        env = {k: v for k, v in os.environ.items() if k.startswith("COMMITTEE_")}
        with redis.Redis.from_url(env["COMMITTEE_REDIS_URL"]) as c:
            kwargs["ping"] = c.ping()
        calls.append(
            {"app": app, "env": env, "sigterm": signal.getsignal(signal.SIGTERM), **kwargs}
        )

    monkeypatch.setattr(serve.uvicorn, "run", record)
    return calls


def test_serve_starts_a_private_redis_and_stops_it(
    runs: list[dict[str, Any]], tmp_path: Path
) -> None:
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["serve", "--data-dir", str(tmp_path), "--port", "9001", "--workers", "3"]) == 0
    [run] = runs
    url = f"unix://{tmp_path / 'redis.sock'}"
    assert run["app"] == "app.http.main:create_app" and run["factory"] is True
    assert (run["host"], run["port"], run["workers"]) == ("127.0.0.1", 9001, 3)
    assert run["ping"] is True
    assert run["env"]["COMMITTEE_REDIS_URL"] == url
    assert run["env"]["COMMITTEE_PORT"] == "9001"
    assert run["env"]["COMMITTEE_WORKERS"] == "3"
    assert run["env"]["COMMITTEE_DATA_DIR"] == str(tmp_path)
    assert run["sigterm"] is not before
    assert signal.getsignal(signal.SIGTERM) is before
    assert not (tmp_path / "redis.sock").exists()  # stopped
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(url).ping()


def test_serve_uses_the_configured_redis_and_env_defaults(
    runs: list[dict[str, Any]], redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COMMITTEE_REDIS_URL", redis_url)
    monkeypatch.setenv("COMMITTEE_HOST", "0.0.0.0")
    monkeypatch.setenv("COMMITTEE_LOG_LEVEL", "warning")
    monkeypatch.setenv("COMMITTEE_KEY_PREFIX", f"serve-{os.getpid()}-{id(tmp_path)}")
    monkeypatch.setenv("COMMITTEE_INSECURE_NO_AUTH", "true")
    assert cli.main(["serve", "--data-dir", str(tmp_path / "unused")]) == 0
    [run] = runs
    assert (run["host"], run["log_level"]) == ("0.0.0.0", "warning")
    assert run["env"]["COMMITTEE_REDIS_URL"] == redis_url
    assert not (tmp_path / "unused").exists()


def test_serve_beyond_loopback_needs_a_key(
    runs: list[dict[str, Any]],
    redis_url: str,
    redis_prefix: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    where = ["serve", "--host", "0.0.0.0", "--redis-url", redis_url]
    os.environ["COMMITTEE_KEY_PREFIX"] = redis_prefix
    assert cli.main(where) == 2  # no key: refused
    assert "--insecure-no-auth" in capsys.readouterr().err and runs == []
    assert cli.main([*where, "--insecure-no-auth"]) == 0
    os.environ["COMMITTEE_ADMIN_KEY"] = "k" * 32  # a key to store on start
    assert cli.main(where) == 0
    del os.environ["COMMITTEE_ADMIN_KEY"]
    assert cli.main(["keys", "create", "--scope", "read", "--redis-url", redis_url]) == 0
    made = capsys.readouterr()
    assert made.out.startswith("cmk_") and "scope read" in made.err
    assert cli.main(where) == 0  # a key exists
    assert len(runs) == 3
    assert cli.main(["serve", "--tls-cert", "cert.pem"]) == 2  # without its key
    assert "go together" in capsys.readouterr().err


def test_serve_rejects_invalid_settings(
    runs: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["serve", "--port", "70000"]) == 2
    assert "port" in capsys.readouterr().err
    assert runs == []


def test_redact_hides_the_password() -> None:
    assert serve.redact("redis://:s3cret@db:6379/0") == "redis://:***@db:6379/0"
    assert serve.redact("redis://user:s3cret@db/0") == "redis://user:***@db/0"
    assert serve.redact("unix:///tmp/redis.sock") == "unix:///tmp/redis.sock"
