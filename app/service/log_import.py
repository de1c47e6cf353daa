"""A labelled history replayed into a model through its log, resumable and idempotent by
line.

An import is a sequence of lines, numbered from 1, sent in requests under an id of the
caller's (``import_id``). Each line is a trial to learn (an instance and its label, as a
learn takes them) or a change of the model's input; a trial is appended to the log as a
learn is, a change as ``POST .../experts`` (``.../features``, ``.../labels``) appends it.

Idempotency is by line: lines fall in blocks of :data:`BLOCK` by their numbers (lines 1 to
100, 101 to 200, ...), and the trials of a block are appended as one group under the
idempotency key ``import/<import_id>/<block>``, atomically with their record; a change,
under ``import/<import_id>/line/<line>``. Sent again (a retry, or an import run again
after it was stopped), a block is not appended again: its lines count as ``already``. A
block split by change lines is appended as several groups, each keyed, the last under the
block's key, so that a block's record stands for the whole block. A request starts at the
first line of a block; it holds whole blocks, except the import's last. The records last
as long as the model's label window (``label_ttl``, a day by default), as every
idempotency record does: an import is resumed within it.

Where an import stopped (:func:`resume_line`) is found from the records: the first block
without one, the blocks of an import being appended in order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.errors import BadInput, Forbidden
from app.service.model_service import ModelService, request_digest
from app.service.trial_calls import LearnRequest
from storage.errors import Conflict
from storage.repository import Idempotency
from storage.store.calls import EARLIER

__all__ = [
    "BLOCK",
    "IMPORT_ID_PATTERN",
    "ChangeLine",
    "Imported",
    "TrialLine",
    "apply_lines",
    "resume_line",
]

#: lines per block: the unit an import appends at most once (part of the protocol: a
#: block's key names its number, so it never changes)
BLOCK = 100
IMPORT_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"
_PROBES = 64  # idempotency records read in one round trip while finding where an import stopped

Admit = Callable[[int], Awaitable[None]] | None


@dataclass(frozen=True, slots=True)
class TrialLine:
    """A trial to learn: line ``line`` (its text ``raw``), its instance payload and label."""

    line: int
    raw: bytes
    instance: Any
    label: Any


@dataclass(frozen=True, slots=True)
class ChangeLine:
    """A change of the model's input: ``{"experts": ..., "features": ..., "labels": ...}``."""

    line: int
    raw: bytes
    change: dict[str, Any]


Line = TrialLine | ChangeLine


@dataclass(slots=True)
class Imported:
    """What a request of an import did: of its ``lines`` (from ``first_line``), those
    appended now (``applied``), those appended by an earlier request (``already``) and
    those refused (``errors``: line and error); blank lines are none of these."""

    import_id: str
    first_line: int
    lines: int
    applied: int = 0
    already: int = 0
    errors: list[tuple[int, Exception]] = field(default_factory=list)
    model_version: int = 0

    @property
    def next_line(self) -> int:
        return self.first_line + self.lines


@dataclass(slots=True)
class _Group:
    """Trial lines of one block appended as one group (between change lines)."""

    block: int
    lines: list[TrialLine] = field(default_factory=list)
    key: str = ""


def _block_key(import_id: str, block: int) -> str:
    return f"import/{import_id}/{block}"


def check_start(first_line: int) -> None:
    """A request starts at the first line of a block."""
    if (first_line - 1) % BLOCK:
        start = first_line - (first_line - 1) % BLOCK
        raise BadInput(
            "first_line",
            f"{first_line}: a request starts a block of {BLOCK} lines (1, {BLOCK + 1}, "
            f"{2 * BLOCK + 1}, ...): send from line {start}",
            "query",
        )


def _steps(
    import_id: str, first_line: int, count: int, lines: Sequence[Line]
) -> list[list[_Group] | ChangeLine]:
    """The lines of a request (``count`` lines from ``first_line``, ``lines`` those not
    blank) as steps in order: runs of groups (each run appended in one call) and changes.
    A block's trial lines between its change lines form its groups, each keyed; its last
    group comes after all its lines (empty when a change line, or blank lines, end the
    block) and has the block's key, so that the block's record stands for the whole
    block."""
    steps: list[list[_Group] | ChangeLine] = []

    def emit(g: _Group) -> None:
        last = steps[-1] if steps else None
        if isinstance(last, list):
            last.append(g)
        else:
            steps.append([g])

    by_block: dict[int, list[Line]] = {}
    for item in lines:
        by_block.setdefault((item.line - 1) // BLOCK, []).append(item)
    first, last = (first_line - 1) // BLOCK, (first_line + count - 2) // BLOCK
    for block in range(first, last + 1):
        groups = [_Group(block)]
        for item in by_block.get(block, []):
            if isinstance(item, TrialLine):
                groups[-1].lines.append(item)
                continue
            if groups[-1].lines:
                emit(groups[-1])
                groups.append(_Group(block))
            steps.append(item)
        emit(groups[-1])
        key = _block_key(import_id, block)
        for part, g in enumerate(groups):
            g.key = key if part == len(groups) - 1 else f"{key}.{part}"
    return steps


def _digest(name: str, g: _Group) -> str:
    first = g.lines[0].line if g.lines else 0
    return request_digest("import", name, str(first), *(x.raw for x in g.lines))


async def apply_lines(
    service: ModelService,
    name: str,
    import_id: str,
    first_line: int,
    count: int,
    lines: Sequence[Line],
    *,
    may_change: bool,
    admit: Admit = None,
) -> Imported:
    """Append ``lines`` (of a request of ``count`` lines from ``first_line``, blank ones
    left out) to model ``name``'s log, each block and change at most once (see the
    module). ``may_change``: whether the caller may change the model's input (an admin
    key); a change line is refused otherwise. ``admit`` is run with the number of trials
    first (the caller's rate limit)."""
    check_start(first_line)
    done = Imported(import_id, first_line, count)
    trials = sum(isinstance(x, TrialLine) for x in lines)
    if admit is not None and trials:
        await admit(trials)
    for step in _steps(import_id, first_line, count, lines):
        if isinstance(step, ChangeLine):
            await _change(service, name, import_id, step, done, may_change)
        else:
            await _learn(service, name, step, done)
    done.model_version = (await service.replicas.live(name)).version
    return done


async def _learn(service: ModelService, name: str, groups: list[_Group], done: Imported) -> None:
    """Append a run of groups in one call; count each line."""
    digests = [_digest(name, g) for g in groups]
    incarnation = (await service.replicas.live(name)).incarnation
    before = await service.store.history.records(name, [g.key for g in groups])
    requests: list[LearnRequest] = [
        (Idempotency(g.key, d), [(x.instance, x.label) for x in g.lines])
        for g, d in zip(groups, digests, strict=True)
    ]
    results = await service.trials.learn_groups(name, requests)
    after: list[tuple[str, str, str] | None] | None = None
    for at, (g, d, old, out) in enumerate(zip(groups, digests, before, results, strict=True)):
        was = old is not None and old[0] == "learn" and old[1] == d and old[2] == incarnation
        for x, r in zip(g.lines, out, strict=True):
            if isinstance(r, BadInput):
                done.errors.append((x.line, r))
            elif isinstance(r, Conflict):
                done.errors.append((x.line, _reused(g, r)))
            elif was:
                done.already += 1
            elif not isinstance(r, Exception):
                done.applied += 1
            else:
                # a request of the same block running at the same time appended it, and
                # has not kept its answer yet: the group is there if its record is
                if after is None:
                    after = await service.store.history.records(name, [g.key for g in groups])
                now = after[at]
                if now is not None and now[1] == d and now[2] == incarnation:
                    done.already += 1
                else:
                    done.errors.append((x.line, r))


def _reused(g: _Group, e: Conflict) -> Conflict:
    lines = f"{g.lines[0].line} to {g.lines[-1].line}" if g.lines else "of its block"
    if str(e) == EARLIER:
        return Conflict(
            f"lines {lines}: this import id was used with a model of this name that has "
            "been deleted since: import under another id"
        )
    return Conflict(
        f"lines {lines}: this import id imported other lines there before: import under "
        "another id, or send the same lines"
    )


async def _change(
    service: ModelService,
    name: str,
    import_id: str,
    c: ChangeLine,
    done: Imported,
    may_change: bool,
) -> None:
    if not may_change:
        done.errors.append((c.line, Forbidden("a change of the model's input needs an admin key")))
        return
    idem = Idempotency(
        f"import/{import_id}/line/{c.line}", request_digest("import change", name, c.raw)
    )
    try:
        m = await service.replicas.live(name)
        if await service.store.earlier(name, m.incarnation, idem, "change") is not None:
            done.already += 1
            return
        await service.change_input(name, c.change, idem)
    except BadInput as e:
        done.errors.append((c.line, BadInput(f"change.{e.field}", e.message)))
    except Conflict as e:
        done.errors.append((c.line, e))
    else:
        done.applied += 1


async def resume_line(service: ModelService, name: str, import_id: str) -> int:
    """The line an import under ``import_id`` resumes at: the first line of the first
    block of it that model ``name`` has no record of (1 when it has none)."""
    incarnation = (await service.replicas.live(name)).incarnation

    async def kept(blocks: list[int]) -> list[bool]:
        got = await service.store.history.records(name, [_block_key(import_id, b) for b in blocks])
        return [r is not None and r[0] == "learn" and r[2] == incarnation for r in got]

    # the first power of two without a record, then the first block without one below it
    powers = [0, *(1 << i for i in range(48))]
    have = await kept(powers)
    if not have[0]:
        return 1
    first = next((i for i in range(1, len(powers)) if not have[i]), len(powers) - 1)
    lo, hi = powers[first - 1], powers[first]  # kept, not kept
    while hi - lo > 1:
        step = max(1, (hi - lo) // (_PROBES + 1))
        probes = list(range(lo + step, hi, step))[:_PROBES]
        for b, ok in zip(probes, await kept(probes), strict=True):
            if ok:
                lo = b
            else:
                hi = b
                break
    return hi * BLOCK + 1
