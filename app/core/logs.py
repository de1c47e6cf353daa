"""Structured logs: one JSON object per line (or plain text), for the app and uvicorn."""

from __future__ import annotations

import faulthandler
import logging
import signal
import sys
import time
from typing import Any

import orjson

__all__ = ["JsonFormatter", "log_config"]

# attributes every LogRecord has; anything else was passed with ``extra=``
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "message", ...extra}`` per line."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.name == "uvicorn.access" and isinstance(record.args, tuple):
            client, method, path, _, status = (record.args + (None,) * 5)[:5]
            doc.update(client=client, method=method, path=path, status=status)
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in doc:
                doc[key] = value
        if record.exc_info:
            doc["error"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


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
