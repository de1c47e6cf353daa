"""Structured logs."""

from __future__ import annotations

import json
import logging
import logging.config
from collections.abc import Iterator

import pytest

from app.core.logs import JsonFormatter, log_config


def test_json_lines_carry_extras_and_access_fields() -> None:
    f = JsonFormatter()
    record = logging.LogRecord("committee.service", logging.INFO, "", 0, "loaded %s", ("m",), None)
    record.model = "m"
    doc = json.loads(f.format(record))
    assert doc["message"] == "loaded m" and doc["model"] == "m" and doc["level"] == "info"
    assert doc["ts"].endswith("Z")
    access = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        "",
        0,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "POST", "/v1/models/m/learn", "1.1", 200),
        None,
    )
    doc = json.loads(f.format(access))
    assert (doc["method"], doc["path"], doc["status"]) == ("POST", "/v1/models/m/learn", 200)


@pytest.fixture
def restore_loggers() -> Iterator[None]:
    names = ("uvicorn", "uvicorn.access", "committee")
    saved = [(lg, lg.handlers[:], lg.level, lg.propagate) for lg in map(logging.getLogger, names)]
    yield
    for lg, handlers, level, propagate in saved:
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate


@pytest.mark.parametrize("fmt", ["json", "text"])
@pytest.mark.usefixtures("restore_loggers")
def test_config_applies(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    logging.config.dictConfig(log_config("info", fmt))
    logging.getLogger("committee.test").info("hello %d", 7)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    if fmt == "json":
        assert json.loads(err)["message"] == "hello 7"
    else:
        assert err.endswith("committee.test: hello 7")
