"""What a dashboard polls: a model's counters, pending trials, mistake curves and
learner summary, read in one step and kept parsed while Redis answers the same."""

from __future__ import annotations

import re
from typing import Any

import orjson

from storage.errors import CorruptData, ModelNotFound
from storage.scripts import WINDOW_POINTS
from storage.store.calls import Calls
from storage.store.records import Statistics, as_int, parse_meta

__all__ = ["CURVES_KEPT", "StatisticsReader"]

CURVES_KEPT = 4_096  # models whose last-read mistake curve and statistics are kept, parsed

_NUMBER = rb"(?:0|[1-9]\d{0,17})"  # as written: no leading zero (also JSON's rule)
_POINTS = re.compile(rb"(?:%b:%b\n)*" % (_NUMBER, _NUMBER))


def _points(raw: list[bytes], what: str) -> list[tuple[int, int]]:
    """``b"<trials>:<mistakes>"`` points, checked and converted in one pass."""
    if not raw:
        return []
    if not all(type(v) is bytes for v in raw):
        raise CorruptData(f"{what}: expected '<trials>:<mistakes>' points")
    joined = b"\n".join(raw)
    if not _POINTS.fullmatch(joined + b"\n"):
        raise CorruptData(f"{what}: expected '<trials>:<mistakes>' points")
    # checked: integers as JSON writes them
    flat = orjson.loads(b"[%b]" % joined.replace(b":", b",").replace(b"\n", b","))
    return list(zip(flat[::2], flat[1::2], strict=True))


def _window(reply: Any) -> tuple[int, int]:
    """Trials and mistakes in the sliding window, from its length and end points. Until
    the window list is full it starts at trial 0."""
    if not isinstance(reply, list) or not reply or not isinstance(reply[0], int):
        raise CorruptData("window: expected its length and end points")
    if reply[0] == 0:
        return 0, 0
    if len(reply) != 3:
        raise CorruptData("window: expected its length and end points")
    (t0, m0), (t1, m1) = _points(reply[1:], "window")
    if reply[0] < WINDOW_POINTS:
        t0, m0 = 0, 0
    return t1 - t0, m1 - m0


class StatisticsReader:
    """The statistics of the models of one key prefix, the last read of each kept."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls
        self._curves: dict[str, tuple[bytes, list[tuple[int, int]]]] = {}  # mark, points
        self._statistics: dict[str, tuple[list[Any], Statistics]] = {}

    async def read_statistics(self, name: str, now_ms: int) -> Statistics:
        """Counters, pending trials, the mistake curves and the learner summary, in one
        round trip. Dashboards poll them, often several at once: the statistics read last
        for each model are kept, and given again (the same object) while Redis answers the
        same."""
        held = self._curves.get(name)  # the curve is sent only when it is not this one
        args = [now_ms, held[0] if held is not None else ""]
        reply = await self.calls.run("STATS", name, self.calls.keys(name).all_fixed(), args)
        # what it says: the curve's mark stands for the curve, sent or not
        said = [*reply[:4], b"same", *reply[5:]]
        kept = self._statistics.get(name)
        if kept is not None and kept[0] == said:  # polled again before anything changed
            return kept[1]
        got = self._statistics_of(name, reply, held)
        if len(self._statistics) >= CURVES_KEPT:
            self._statistics.clear()
        self._statistics[name] = (said, got)
        return got

    def _statistics_of(
        self, name: str, reply: Any, held: tuple[bytes, list[tuple[int, int]]] | None
    ) -> Statistics:
        if not isinstance(reply, list) or len(reply) != 9:
            raise CorruptData(f"model {name!r}: script STATS replied {reply!r:.200}")
        _, flat, pending, overdue, curve, window, sv, doc, mark = reply
        if not isinstance(flat, list) or len(flat) % 2:
            raise CorruptData(f"model {name!r}: statistics: its meta is not a field list")
        meta = dict(zip(flat[::2], flat[1::2], strict=True))
        doc = doc or None
        sv = sv or None
        if not meta:
            raise ModelNotFound(name)
        summary = None
        if doc is not None:
            try:
                summary = orjson.loads(doc)
            except orjson.JSONDecodeError:
                raise CorruptData(f"model {name!r}: summary is not JSON") from None
            if not isinstance(summary, dict):
                raise CorruptData(f"model {name!r}: summary is not an object")
        return Statistics(
            model=parse_meta(name, meta),
            pending=as_int(pending, "pending"),
            overdue=as_int(overdue, "overdue"),
            curve=self._curve(name, curve, mark, held),
            window=_window(window),
            summary_version=-1 if sv is None else as_int(sv, "summary version"),
            summary=summary,
        )

    def _curve(
        self, name: str, raw: Any, mark: Any, held: tuple[bytes, list[tuple[int, int]]] | None
    ) -> list[tuple[int, int]]:
        """The mistake curve in ``raw``: dashboards poll it while it changes every many
        trials, so the points read last for each model are kept with the curve's mark,
        and Redis sends them again only when the mark moved (``raw`` is then ``b"same"``
        and ``held`` the points that were marked so), and then only the points after
        ``held``'s where those begin the curve (``raw`` is ``[b"+", *points]``)."""
        if not isinstance(mark, bytes) or not mark:
            raise CorruptData(f"model {name!r}: curve: no mark")
        if raw == b"same":
            if held is None or held[0] != mark:
                raise CorruptData(f"model {name!r}: curve: told it is the same as none held")
            return held[1]
        if not isinstance(raw, list):
            raise CorruptData(f"model {name!r}: curve: expected a list of points")
        if raw[:1] == [b"+"]:
            if held is None:
                raise CorruptData(f"model {name!r}: curve: sent the points after none held")
            points = held[1] + _points(raw[1:], f"model {name!r}: curve")
        else:
            points = _points(raw, f"model {name!r}: curve")
        if len(self._curves) >= CURVES_KEPT:
            self._curves.clear()
        self._curves[name] = (mark, points)
        return points

    async def save_summary(self, name: str, incarnation: str, version: int, doc: bytes) -> None:
        keys = self.calls.keys(name).all_fixed()
        await self.calls.run("SUMMARY", name, keys, [incarnation, version, doc])
