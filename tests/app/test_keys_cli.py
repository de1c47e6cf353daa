"""``committee keys``: make, list and revoke keys in Redis, as the service sees them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from app.cli import main as cli
from app.core.settings import Settings
from storage.server import EmbeddedRedis


def _keys(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = cli.main(["keys", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_keys_made_on_the_command_line_gate_the_service(
    redis_url: str, redis_prefix: str, server_thread: type, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--redis-url", redis_url, "--key-prefix", redis_prefix]
    rc, key, err = _keys(capsys, "create", "--scope", "read", "--name", "ops", *where)
    assert rc == 0 and key.startswith("cmk_") and key.count("\n") == 1
    assert "scope read" in err and "shown once" in err
    key = key.strip()
    rc, out, _ = _keys(capsys, "list", "--json", *where)
    [listed] = json.loads(out)["keys"]
    assert (listed["scope"], listed["models"], listed["name"]) == ("read", "*", "ops")
    assert key not in out and "digest" not in out  # neither the secret nor its hash
    settings = Settings(redis_url=redis_url, key_prefix=redis_prefix, warmup=False)
    with server_thread(settings) as server, httpx.Client(base_url=server.url) as c:
        assert c.get("/v1/models").status_code == 401
        assert c.get("/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        assert _keys(capsys, "revoke", listed["id"], *where)[0] == 0
        c.headers["Authorization"] = f"Bearer {key}"
        # this worker re-reads the table within a second (it polls its version); with
        # no key left, auth stays on
        for _ in range(40):
            if c.get("/v1/models").status_code == 401:
                break
            time.sleep(0.05)
        assert c.get("/v1/models").status_code == 401
    rc, _, err = _keys(capsys, "revoke", listed["id"], *where)
    assert rc == 1 and "no key" in err
    rc, out, _ = _keys(capsys, "list", *where)
    assert rc == 0 and listed["id"] not in out


def test_the_first_key_holds_from_its_first_use_on_a_worker_that_knew_none(
    redis_url: str, redis_prefix: str, server_thread: type, capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker polls the key table a few times a second; one that knows no key yet
    (auth off) and is shown one reads the table at once, so that key's scope and limits
    hold from its first request rather than after the next poll."""
    where = ["--redis-url", redis_url, "--key-prefix", redis_prefix]
    settings = Settings(redis_url=redis_url, key_prefix=redis_prefix, warmup=False)
    model = {"labels": [0, 1], "input": {"attributes": {"n_features": 4}}}
    with server_thread(settings) as server, httpx.Client(base_url=server.url) as c:
        assert c.get("/v1/models").status_code == 200  # no key yet: open
        rc, key, _ = _keys(capsys, "create", "--scope", "read", *where)
        assert rc == 0
        made = c.post(
            "/v1/models",
            json={"name": "m", **model, "learner": {"kind": "winnow"}},
            headers={"Authorization": f"Bearer {key.strip()}"},
        )
        assert made.status_code == 403, made.text  # a read key makes no model
        assert c.get("/v1/models").status_code == 401


def test_keys_reach_the_private_redis_of_a_running_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = ["--data-dir", str(tmp_path)]
    # no service runs: the command starts the private Redis for itself, and stops it
    rc, key, _ = _keys(capsys, "create", "--scope", "admin", *data)
    assert rc == 0 and key.startswith("cmk_")
    with EmbeddedRedis(tmp_path):  # now one runs there: the command uses it
        rc, out, _ = _keys(capsys, "list", "--json", *data)
        assert rc == 0 and len(json.loads(out)["keys"]) == 1


def test_bad_key_options_are_refused(capsys: pytest.CaptureFixture[str], redis_url: str) -> None:
    rc, _, err = _keys(
        capsys, "create", "--scope", "read", "--models", "a b", "--redis-url", redis_url
    )
    assert rc == 2 and "models" in err
    with pytest.raises(SystemExit):
        cli.main(["keys", "create", "--scope", "root"])
