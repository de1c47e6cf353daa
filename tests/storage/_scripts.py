"""One Lua script of the store called directly on a real Redis, and what it wrote."""

from __future__ import annotations

from typing import Any

import redis

from storage.scripts import Script


def run(r: redis.Redis, script: Script, keys: list[str], args: list[Any]) -> Any:
    """The reply of ``script`` (registered beforehand) called with ``keys`` and ``args``."""
    return r.evalsha(script.sha, len(keys), *keys, *args)


def state(r: redis.Redis, prefix: str) -> dict[bytes, tuple[bytes | None, bool]]:
    """Every key of the test's prefix: its DUMP and whether it expires."""
    return {key: (r.dump(key), r.pttl(key) > 0) for key in r.scan_iter(f"{prefix}:*", 1000)}


def writes_nothing(
    r: redis.Redis, prefix: str, script: Script, keys: list[str], args: list[Any]
) -> Any:
    """The reply of a call that must write nothing (a refusal, or a read)."""
    before = state(r, prefix)
    reply = run(r, script, keys, args)
    assert state(r, prefix) == before, f"{script.name} replied {reply!r} but wrote"
    return reply
