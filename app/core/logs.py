"""Structured logs: one JSON object per line (or plain text), for the app and uvicorn.

Text where a person reads them (the log's stream is a terminal), JSON for a log pipeline
otherwise (:func:`log_format`); a setting given explicitly wins either way.
"""

from __future__ import annotations

import faulthandler
import logging
import re
import signal
import sys
import time
from typing import Any

import orjson

__all__ = ["JsonFormatter", "log_config", "log_format"]

# attributes every LogRecord has; anything else was passed with ``extra=``
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
# extras meant for a terminal only: uvicorn's message with ANSI colours
_TERMINAL_ONLY = frozenset({"color_message"})
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "message", ...extra}`` per line."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": _ANSI.sub("", record.getMessage()),
        }
        if record.name == "uvicorn.access" and isinstance(record.args, tuple):
            client, method, path, _, status = (record.args + (None,) * 5)[:5]
            doc.update(client=client, method=method, path=path, status=status)
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in _TERMINAL_ONLY and key not in doc:
                doc[key] = _ANSI.sub("", value) if isinstance(value, str) else value
        if record.exc_info:
            doc["error"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def log_format(explicit: str | None, stream: Any = None) -> str:
    """The log format: ``explicit`` when given, else ``text`` when ``stream`` (by default
    stderr, where the log goes) is a terminal and ``json`` when it is not."""
    if explicit is not None:
        return explicit
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return "text" if isatty is not None and isatty() else "json"


def log_config(level: str, fmt: str) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` document for uvicorn and the app."""
    formatter = (
        {"()": "app.core.logs.JsonFormatter"}
        if fmt == "json"
        else {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    )
    handler = {"class": "logging.StreamHandler", "formatter": "main", "stream": "ext://sys.stderr"}
    level = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"main": formatter},
        "handlers": {"main": handler},
        "loggers": {
            "uvicorn": {"handlers": ["main"], "level": level, "propagate": False},
            "uvicorn.access": {"handlers": ["main"], "level": level, "propagate": False},
            "committee": {"handlers": ["main"], "level": level, "propagate": False},
        },
    }


def dump_stacks_on_sigusr1() -> None:
    """Make ``kill -USR1`` write every thread's stack to the process's stderr (its log):
    what a worker that seems stuck is doing."""
    err = sys.__stderr__
    if err is not None and hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=err, all_threads=True)
