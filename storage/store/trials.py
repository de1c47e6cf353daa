"""Trials: pending predictions, their labels and learns, each call one script (the
check, the writes and the read of the log a worker has not seen yet in one atomic step
and one round trip)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from storage.codec import parse_int
from storage.errors import CorruptData, redis_errors
from storage.store.calls import Calls, fold_keys, new_stamp, position, sync_of
from storage.store.records import (
    Idempotency,
    LabelResult,
    LearnGroup,
    LearnResult,
    PredictResult,
    Sync,
    as_int,
    text,
)

__all__ = ["Trials"]

# the head of a trial as the scripts keep it (storage/lua/prelude/model.lua), its outcome
# captured: '<p>:<v>:<d>:<y>:<q>:<u>:<length of x>:'
_TRIAL = re.compile(rb"\d+:\d*:\d+:\d*:\d*:([0-4]?):\d+:")
# a trial script's per-item results: each status it writes and the length of the result
_RESULTS = {
    "PREDICT": {b"ok": 1, b"existing": 4, b"conflict": 1, b"full": 1, b"invalid": 1},
    "LABEL": {b"ok": 5, b"repeat": 4, b"conflict": 2, b"expired": 1, b"unknown": 1, b"invalid": 1},
    "LEARN": {b"ok": 2, b"repeat": 5, b"mismatch": 1},
}
# the results that are a status alone, one of each (they are frozen)
_BARE_PREDICT = {s.encode(): PredictResult(s) for s in ("ok", "conflict", "full", "invalid")}
_BARE_LABEL = {s.encode(): LabelResult(s) for s in ("expired", "unknown", "invalid")}


def _results(script: str, name: str, reply: list[Any], n: int) -> list[list[Any]]:
    """The ``n`` per-item results of a trial script's ``{'ok', version, folded, entries,
    results}`` reply, each a status the script writes, of the length it writes it with;
    else :class:`CorruptData`."""
    shapes = _RESULTS[script]
    got = reply[4] if len(reply) == 5 else None
    if type(got) is list and len(got) == n:
        for r in got:
            if type(r) is not list or not r or type(r[0]) is not bytes:
                break
            if shapes.get(r[0]) != len(r):
                break
        else:
            return got
    raise CorruptData(f"model {name!r}: script {script} replied {reply!r:.200}: not its results")


class Trials:
    """The trials of the models of one key prefix."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    async def sync(
        self, name: str, incarnation: str, known: int, fold: bytes, limit: int, *, seen: str = ""
    ) -> Sync:
        """Fold, and read the log after ``known`` (``seen``: the stamp of the caller's
        entry at ``known``, checked; every call below takes it alike)."""
        k = self.calls.keys(name)
        fold_first, named = fold_keys(k, incarnation, fold)
        args = [incarnation, position(known, seen), fold, limit]
        reply = await self.calls.run("SYNC", name, [*k.all_fixed(), *named], args)
        return sync_of(reply, "", fold_first)

    async def predict(
        self,
        name: str,
        incarnation: str,
        known: int,
        *,
        strict: bool,
        ttl_ms: int,
        fold: bytes,
        limit: int,
        most_pending: int,
        items: Sequence[tuple[str, bytes, int, bytes]],
        seen: str = "",
    ) -> tuple[Sync, list[PredictResult] | None]:
        """Store pending predictions made at version ``known``.

        Returns None for the results when ``strict`` and ``known`` is not current: catch
        up with the returned entries, predict again and retry.
        """
        k = self.calls.keys(name)
        args: list[Any] = [incarnation, position(known, seen), "1" if strict else "0", ttl_ms]
        args += [fold, limit]
        args.append(most_pending)
        for trial_id, x, p, s in items:
            args += [trial_id, x, p, s]
        prefix = k.trial_prefix(incarnation)
        trials = [prefix + t[0] for t in items]
        fold_first, named = fold_keys(k, incarnation, fold)
        reply = await self.calls.run("PREDICT", name, [*k.all_fixed(), *trials, *named], args)
        sync = sync_of(reply, "", fold_first)
        if reply[0] == b"stale":
            return sync, None
        out = []
        for r in _results("PREDICT", name, reply, len(items)):
            if r[0] == b"existing":
                if type(r[2]) is not bytes:
                    raise CorruptData(f"model {name!r}: a pending trial's scores are {r[2]!r:.50}")
                out.append(
                    PredictResult(
                        "existing", as_int(r[1], "prediction"), r[2], as_int(r[3], "version")
                    )
                )
            else:
                out.append(_BARE_PREDICT[r[0]])
        return sync, out

    async def label(
        self,
        name: str,
        incarnation: str,
        known: int,
        *,
        fold: bytes,
        limit: int,
        items: Sequence[tuple[str, int]],
        seen: str = "",
    ) -> tuple[Sync, list[LabelResult]]:
        """Apply each (trial id, class) to the pending trial, at most once.

        The sync's entries stop before the first label applied: the caller replays its
        own from the results (each applied one's instance as the log keeps it, its
        class and the prediction served), as :meth:`learn`'s caller does."""
        k = self.calls.keys(name)
        stamp = new_stamp()
        args: list[Any] = [incarnation, position(known, seen, stamp), fold, limit]
        for trial_id, y in items:
            args += [trial_id, y]
        prefix = k.trial_prefix(incarnation)
        trials = [prefix + t[0] for t in items]
        fold_first, named = fold_keys(k, incarnation, fold)
        reply = await self.calls.run("LABEL", name, [*k.all_fixed(), *trials, *named], args)
        out = []
        for (trial_id, _), r in zip(items, _results("LABEL", name, reply, len(items)), strict=True):
            status = text(r[0])
            if status == "ok":
                if len(r) < 5 or not all(isinstance(v, bytes) for v in r[3:]):
                    raise CorruptData(f"model {name!r}: label of {trial_id!r}: reply {r!r:.200}")
                p, seq = as_int(r[1], "prediction"), as_int(r[2], "seq")
                out.append(LabelResult("ok", p, seq, instance=r[3]))
            elif status == "repeat":
                u = -1 if r[3] in (b"", None) else as_int(r[3], "updated")
                out.append(
                    LabelResult("repeat", as_int(r[1], "prediction"), as_int(r[2], "seq"), u)
                )
            elif status == "conflict":
                out.append(LabelResult("conflict", label=as_int(r[1], "label")))
            else:
                out.append(_BARE_LABEL[r[0]])
        sync = sync_of(reply, stamp, fold_first)
        # the labels applied are the log's last entries, in order
        applied = [r.seq for r in out if r.status == "ok"]
        if applied != list(range(sync.version - len(applied) + 1, sync.version + 1)):
            raise CorruptData(
                f"model {name!r}: labels applied as log entries {applied[:4]} ending the "
                f"log at {sync.version}"
            )
        return sync, out

    async def read_outcome(self, name: str, incarnation: str, trial_id: str) -> int | None:
        """The folded outcome of labelling ``trial_id`` (see :mod:`storage.scripts`: 0..3),
        None if not folded yet."""
        c = self.calls
        async with redis_errors():
            raw = await c.client.get(c.keys(name).trial(incarnation, trial_id))
        if raw is None:
            return None
        m = _TRIAL.match(raw) if isinstance(raw, bytes) else None
        if m is None:
            raise CorruptData(f"model {name!r}: trial {trial_id!r} is not one the scripts write")
        return parse_int(m[1], "outcome", 0, 3) if m[1] else None

    async def learn(
        self,
        name: str,
        incarnation: str,
        known: int,
        *,
        fold: bytes,
        limit: int,
        keep_ms: int,
        groups: Sequence[LearnGroup],
        seen: str = "",
    ) -> tuple[Sync, list[LearnResult]]:
        """Append trials with known labels, each group at most once per idempotency key.

        The sync's entries stop before the first appended item: the caller applies its
        own items."""
        k = self.calls.keys(name)
        keys = k.all_fixed()
        stamp = new_stamp()
        args: list[Any] = [incarnation, position(known, seen, stamp), fold, limit, keep_ms]
        for g in groups:
            if g.idem is not None:
                keys.append(k.idem(g.idem.key))
            args += [g.idem.key if g.idem else "", g.idem.digest if g.idem else ""]
            args.append(len(g.items))
            for x, y in g.items:
                args += [x, y]
        fold_first, named = fold_keys(k, incarnation, fold)
        reply = await self.calls.run("LEARN", name, [*keys, *named], args)
        out = []
        for r in _results("LEARN", name, reply, len(groups)):
            status = text(r[0])
            if status == "ok":
                out.append(LearnResult("ok", as_int(r[1], "first seq")))
            elif status == "repeat":
                first, count = as_int(r[1], "first seq"), as_int(r[2], "count")
                out.append(LearnResult("repeat", first, count, text(r[3]), r[4] or b""))
            else:
                out.append(LearnResult("mismatch"))
        return sync_of(reply, stamp, fold_first), out

    async def keep_answer(self, name: str, idem: Idempotency, answer: bytes) -> None:
        """Keep the answer to the request that used ``idem`` first, for its retries."""
        await self.keep_answers(name, [(idem, answer)])

    async def keep_answers(self, name: str, kept: Sequence[tuple[Idempotency, bytes]]) -> None:
        """:meth:`keep_answer` of each (idempotency, answer), in one script call."""
        k = self.calls.keys(name)
        keys = [k.idem(idem.key) for idem, _ in kept]
        args = [v for idem, answer in kept for v in (idem.digest, answer)]
        await self.calls.run("IDEM_ANSWER", name, keys, args)

    async def learn_outcomes(
        self, name: str, idem: Idempotency, seqs: Sequence[int]
    ) -> dict[int, tuple[int, bool]]:
        """The folded outcomes (predicted class, updated) of learn entries ``seqs`` that
        were appended with ``idem``, those folded so far."""
        c = self.calls
        async with redis_errors():
            got: list[Any] = await c.client.hmget(
                c.keys(name).idem(idem.key), [f"o{s}" for s in seqs]
            )
        out = {}
        for seq, v in zip(seqs, got, strict=True):
            if v is None:
                continue
            p, _, u = text(v).partition(":")
            out[seq] = (
                parse_int(p, "folded prediction"),
                parse_int(u, "folded outcome", 0, 4) == 1,
            )
        return out
