"""The log of ``committee serve``, run for real: text when it goes to a terminal, JSON
lines (without uvicorn's ANSI-coloured copies of messages) when it goes elsewhere, and
the format given explicitly either way."""

from __future__ import annotations

import json
import logging
import os
import pty
import select
import signal
import subprocess
import sys
import time
import uuid

import pytest
from _server import free_port

from app.core.logs import JsonFormatter

READY = "Application startup complete"
TIMEOUT = 120.0  # seconds for the service to start on a busy machine


def _serve_log(redis_url: str, terminal: bool, *args: str) -> list[str]:
    """The log lines of ``committee serve`` up to its start, its output a terminal or a
    pipe."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("COMMITTEE_")},
        "COMMITTEE_REDIS_URL": redis_url,
        "COMMITTEE_KEY_PREFIX": f"t-{uuid.uuid4().hex[:12]}",
        "COMMITTEE_WARMUP": "false",
    }
    cmd = [sys.executable, "-m", "app.cli.main", "serve", "--port", str(free_port()), *args]
    if terminal:
        reader, writer = pty.openpty()
    else:
        reader, writer = os.pipe()
    proc = subprocess.Popen(cmd, stdout=writer, stderr=writer, env=env, start_new_session=True)
    os.close(writer)
    out = b""
    deadline = time.monotonic() + TIMEOUT
    try:
        while READY.encode() not in out:
            assert time.monotonic() < deadline, out.decode(errors="replace")
            if select.select([reader], [], [], 1.0)[0]:
                try:
                    chunk = os.read(reader, 65536)
                except OSError:  # a terminal whose other end has closed
                    chunk = b""
                assert chunk, f"serve stopped: {out.decode(errors='replace')}"
                out += chunk
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        os.close(reader)
    lines = out.decode().replace("\r\n", "\n").splitlines()
    return [line for line in lines if line.strip()]


def _json(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def test_the_log_is_text_on_a_terminal(redis_url: str) -> None:
    lines = _serve_log(redis_url, terminal=True)
    started = [line for line in lines if READY in line]
    assert started and not any(map(_json, started)), lines


def test_the_log_is_json_without_colours_elsewhere(redis_url: str) -> None:
    lines = [line for line in _serve_log(redis_url, terminal=False) if line.startswith("{")]
    docs = [json.loads(line) for line in lines]
    assert any(READY in d["message"] for d in docs), lines
    assert any("Started server process" in d["message"] for d in docs), lines  # coloured
    for d in docs:
        assert "color_message" not in d and "\x1b" not in json.dumps(d), d


@pytest.mark.parametrize(("terminal", "fmt"), [(True, "json"), (False, "text")])
def test_an_explicit_format_wins(redis_url: str, terminal: bool, fmt: str) -> None:
    lines = _serve_log(redis_url, terminal, "--log-format", fmt)
    started = [line for line in lines if READY in line]
    assert started and all(_json(line) == (fmt == "json") for line in started), lines


def test_json_lines_drop_terminal_colours() -> None:
    record = logging.LogRecord(
        "uvicorn.error", logging.INFO, "", 0, "\x1b[1mrunning\x1b[0m", (), None
    )
    record.color_message = "\x1b[32mrunning\x1b[0m"
    doc = json.loads(JsonFormatter().format(record))
    assert doc["message"] == "running" and "color_message" not in doc
