"""A model's alerts in Redis: each raised once whichever worker detects it first (with its
mark on the model's curve), and the model's alert config.

Both live in the model's alerts hash (:attr:`storage.keys.Keys.alerts`), of the model's
incarnation, written by the script ``storage/lua/alert.lua``.
"""

from __future__ import annotations

from typing import Any

import orjson

from storage.errors import CorruptData, ModelNotFound, redis_errors
from storage.repository import ModelStore
from storage.store.records import text

__all__ = ["MAX_RAISED", "AlertStore"]

#: alerts a model's hash remembers as raised, the latest
MAX_RAISED = 256


class AlertStore:
    """The alerts of the models of one store."""

    def __init__(self, store: ModelStore) -> None:
        self.calls = store.calls

    async def _run(self, name: str, incarnation: str, args: list[Any]) -> list[Any]:
        k = self.calls.keys(name)
        reply: list[Any] = await self.calls.run(
            "ALERT", name, [*k.all_fixed(), k.alerts], [incarnation, "0", *args]
        )
        return reply

    async def raise_once(
        self, name: str, incarnation: str, seq: int, what: str, mark: str
    ) -> dict[str, Any] | None:
        """Raise the alert ``what`` of log entry ``seq`` of the model's ``incarnation``,
        marking the curve there with ``mark``: the model's alert config (``{}`` for none)
        when this call raised it, None when it was raised before.
        :class:`ModelNotFound` for a deleted incarnation."""
        reply = await self._run(
            name, incarnation, ["raise", f"{seq}:{what}", seq, "", mark[:200], MAX_RAISED]
        )
        if reply[0] == b"raised":
            return None
        if reply[0] != b"new":
            raise CorruptData(f"script ALERT replied {reply!r:.200}")
        return _config(reply[1])

    async def configure(self, name: str, config: dict[str, Any]) -> None:
        """Set the alert config of the model as it is now."""
        incarnation = await self._incarnation(name)
        await self._run(name, incarnation, ["configure", orjson.dumps(config), 0, "", "", 0])

    async def config(self, name: str) -> dict[str, Any]:
        """The model's alert config (``{}`` for none)."""
        k = self.calls.keys(name)
        async with redis_errors(), self.calls.client.pipeline(transaction=True) as p:
            p.hget(k.meta, "incarnation")
            p.hmget(k.alerts, "inc", "config")
            inc, (owner, raw) = await p.execute()
        if inc is None:
            raise ModelNotFound(name)
        return _config(raw) if owner == inc else {}

    async def _incarnation(self, name: str) -> str:
        async with redis_errors():
            inc = await self.calls.client.hget(self.calls.keys(name).meta, "incarnation")
        if inc is None:
            raise ModelNotFound(name)
        return text(inc)


def _config(raw: Any) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        raise CorruptData(f"an alert config is not a JSON object: {raw!r:.200}")
    return doc
