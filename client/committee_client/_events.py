"""What both clients share of a model's events (``GET /v1/models/{name}/events``): the
events as the client gives them, and the reading of a ``text/event-stream``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

__all__ = ["RESUMED", "Event", "EventReader", "events_request"]

#: the reasons of an ``end`` event after which a stream is opened again, from its last id
RESUMED = frozenset({"lifetime"})


@dataclass(frozen=True, slots=True)
class Event:
    """One event of a model: ``kind`` is ``progress``, ``change``, ``alert``,
    ``challengers`` or ``end``; ``id`` the log position it reflects (None for ``end``);
    ``data`` its JSON document."""

    kind: str
    id: int | None
    data: Any


class EventReader:
    """Lines of a ``text/event-stream`` in, events out (comments and ``retry:`` left
    out)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.kind = "message"
        self._id: int | None = None
        self._data: list[str] = []

    def line(self, text: str) -> Event | None:
        """Take one line (without its end); the event it completes, if any."""
        if text == "":
            event = None
            if self._data:
                event = Event(self.kind, self._id, json.loads("\n".join(self._data)))
            self._reset()
            return event
        if text.startswith(":"):
            return None
        field, _, value = text.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            self.kind = value
        elif field == "id" and value.isdigit():
            self._id = int(value)
        elif field == "data":
            self._data.append(value)
        return None


def events_request(
    name: str, last_event_id: int | None, every: int | None
) -> tuple[str, dict[str, str], dict[str, int]]:
    """The path, headers and query of a request for model ``name``'s events."""
    headers = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    query = {} if every is None else {"every": every}
    return f"/v1/models/{quote(name, safe='')}/events", headers, query
