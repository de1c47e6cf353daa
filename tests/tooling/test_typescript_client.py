"""The TypeScript client (``clients/typescript``) against the real service: its types,
generated from the OpenAPI document, are those the live service serves, and its own tests
(``npm test``: tsc, strict, then Node's test runner) pass against two services started
here, one with auth off and one with an admin key.

Node.js 20+ and npm are needed; the package's dependencies are installed by
``clients/typescript/scripts/install.sh`` (``npm ci``) when missing or stale.
"""

from __future__ import annotations

import difflib
import os
import re
import secrets
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from _server import ServerThread  # type: ignore[import-not-found]

from app.core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "typescript"
SCHEMA = PACKAGE / "src" / "schema.ts"
INSTALL_TIMEOUT = 600.0  # seconds for `npm ci` on a fresh machine
RUN_TIMEOUT = 300.0  # seconds for the generator, and for `npm test`
TAIL = 12_000  # characters of npm's output shown on a failure
NODE_MAJOR = 20  # as package.json's "engines"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"the TypeScript client's tests need `{name}` (Node.js {NODE_MAJOR} or newer and "
            "npm) on PATH: install them (Debian: apt-get install nodejs npm)",
            pytrace=False,
        )
    return path


def _run(
    command: list[str], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        cwd=PACKAGE,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def node_env() -> dict[str, str]:
    """The environment of node and npm: this one without the service's ``COMMITTEE_*``
    settings (an API key among them), with the package's dependencies installed."""
    node = _tool("node")
    _tool("npm")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMITTEE_")}
    env.update(NO_COLOR="1", npm_config_update_notifier="false")
    version = _run([node, "--version"], env, RUN_TIMEOUT).stdout.strip()  # v20.20.2
    if int(version.lstrip("v").split(".")[0] or 0) < NODE_MAJOR:
        pytest.fail(
            f"the TypeScript client needs Node.js {NODE_MAJOR}+, found {version}", pytrace=False
        )
    done = _run(["sh", str(PACKAGE / "scripts" / "install.sh")], env, INSTALL_TIMEOUT)
    if done.returncode != 0:
        pytest.fail(f"npm ci failed:\n{done.stdout}{done.stderr}", pytrace=False)
    return env


@pytest.fixture(scope="module")
def services(redis_url: str) -> Iterator[dict[str, str]]:
    """The service twice, with its default settings (the OpenAPI document shows some of
    them): auth off, and auth on with a bootstrap admin key. The variables the TypeScript
    tests read them from."""
    run = uuid.uuid4().hex[:12]
    admin_key = secrets.token_urlsafe(32)
    open_settings = Settings(redis_url=redis_url, key_prefix=f"ts-open-{run}")
    secured_settings = Settings(
        redis_url=redis_url, key_prefix=f"ts-auth-{run}", admin_key=admin_key
    )
    with ServerThread(open_settings) as open_server, ServerThread(secured_settings) as secured:
        yield {
            "COMMITTEE_URL": open_server.url,
            "COMMITTEE_SECURED_URL": secured.url,
            "COMMITTEE_SECURED_ADMIN_KEY": admin_key,
        }


def test_generated_types_are_those_of_the_live_openapi_document(
    node_env: dict[str, str], services: dict[str, str], tmp_path: Path
) -> None:
    fresh = tmp_path / "schema.ts"
    command = ["node", "scripts/generate.mjs", services["COMMITTEE_URL"], str(fresh)]
    done = _run(command, node_env, RUN_TIMEOUT)
    if done.returncode != 0:
        pytest.fail(f"the generator failed:\n{done.stdout}{done.stderr}", pytrace=False)
    committed, generated = SCHEMA.read_text(), fresh.read_text()
    if committed != generated:
        diff = difflib.unified_diff(
            committed.splitlines(keepends=True),
            generated.splitlines(keepends=True),
            "committed src/schema.ts",
            "generated from /openapi.json",
        )
        pytest.fail(
            "clients/typescript/src/schema.ts differs from the service's OpenAPI document; "
            "regenerate it against a service with the default settings (`./run start`): "
            "cd clients/typescript && npm run generate\n" + "".join(diff)[:TAIL],
            pytrace=False,
        )


def test_npm_test_passes_against_the_service(
    node_env: dict[str, str], services: dict[str, str]
) -> None:
    done = _run(["npm", "test"], {**node_env, **services}, RUN_TIMEOUT)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        pytest.fail(f"npm test exited with {done.returncode}:\n{output[-TAIL:]}", pytrace=False)
    # Node's spec reporter closes with the counts: some tests ran, and none failed
    passed = re.search(r"^ℹ pass (\d+)$", output, re.MULTILINE)
    assert passed is not None and int(passed.group(1)) > 0, output[-TAIL:]
    assert re.search(r"^ℹ fail 0$", output, re.MULTILINE), output[-TAIL:]
