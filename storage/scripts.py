"""The Lua scripts, one file each in ``storage/lua``, loaded once into :data:`SCRIPTS`.

A script file's first line names the preludes (``storage/lua/prelude``) it runs after::

    -- prelude: model, once

and Redis runs the constants below (as Lua locals), those preludes and the file, as one
text. Callers send it by its SHA1 (EVALSHA), and whole when Redis does not know it yet
(EVAL, which caches it): see :func:`storage.resp.script_call`.

The trial scripts. Every script with the ``model`` prelude takes the same fixed keys, all
of one model, built by :meth:`storage.keys.Keys.all_fixed`, then the keys of the call::

    KEYS[1] meta   KEYS[2] log   KEYS[3] snapshot   KEYS[4] pending   KEYS[5] trials
    KEYS[6] curve  KEYS[7] window     KEYS[8] summary
    KEYS[9..] one trial key per item (predict, label), or idempotency records (learn)
    then, last, the key of each folded outcome that names one (see Folding)

``pending`` is written by no script (CREATE and DELETE clear it): a trial is one string
(its instance, scores and state, expiring by itself) and ``trials`` indexes every trial
kept, by its deadline while pending and by minus its purge time once labelled or expired,
so the pending and overdue counts are two ZCOUNTs and a prediction writes the trial and
its index entry (see ``storage/lua/prelude/model.lua``).

and starts with ``ARGV[1]`` = the model's incarnation: a script for a model that was
deleted (and perhaps re-created) replies ``{'gone'}`` and writes nothing. Trial keys carry
the incarnation too, so nothing of a deleted model is ever applied to its successor. The
scripts build no key names and touch no key they are not given, so that a Redis Cluster
routes each call whole to one node, a slot being moved included.

Replies are flat arrays led by a status string. ``entries`` is the log after the caller's
``known`` version (XRANGE format, at most ``limit`` entries) so that a worker catches up in
the same round trip; LABEL and LEARN stop it before what they append, which the caller
has already or is sent in the results. ``{'reload'}`` means the log no longer reaches back
to ``known`` (or Redis holds less than the worker has seen), and the worker must reload
the model.

Whatever a script writes into the log is checked first: a class index below the model's
``k`` labels, an instance whose binary form is well made and whose largest coordinate is
below the model's ``n``. A script that finds a bad item writes nothing.

Folding. The log is the truth; mistakes, updates, the confusion counts, the mistake curve
and each labelled trial's ``updated`` flag follow from replaying it, which every worker
does. ``fold`` is a JSON document ``{"a": first seq, "e": [[y, p, u, trial id], ...]}`` of
outcomes a worker computed; each script first folds the entries after ``meta.folded`` (in
order, each exactly once) and ignores those already folded, so any worker may report any
outcome any number of times; the outcome of a learn appended with an idempotency key
(id ``!<key>``) goes into that key's record as field ``o<seq>`` = ``p:u``, so a retry
answers from it whoever replays. ``u`` is 0 (no update), 1 (updated), 2 (the entry could not
be replayed and was skipped by every worker: quarantined), 3 (the learner refused the
update whole) or 4 (a change of the model's input, not a trial: nothing is counted).

The model scripts. Each touches one slot: a model's keys, or the registry's. Creating a
model is three steps, deleting it three, and the registry (:class:`storage.keys.Registry`)
agrees with the models whatever crashes between them:

- create: REGISTER lists the name with the new incarnation (or refuses: the registry is
  full) and marks it unsettled; CREATE makes the model's keys; SETTLE sets the name to the
  incarnation that exists (or none) and settles it.
- delete: UNSETTLE marks the name unsettled; DELETE removes the model's keys; SETTLE
  removes the name if it still holds that incarnation.

Every write to a name's entry is conditional on the incarnation read before it, so a
create racing a delete never loses the newer model's entry. A name left unsettled by a
crash is settled by the sweep once it is older than any step can take: the entry then
names the incarnation in the model's meta, or nothing. Until then a listed name without
a model is skipped by readers, and counts toward the most models.

A delete removes a model's keys at once, except the trial keys of a model with many kept
trials: those move to a grave (a sorted set, listed in the registry before the delete
runs) that SWEEP empties a batch at a time, so no single step blocks Redis for long and a
crash leaves the rest listed for the next sweep. A grave is unlisted once empty and once
its model's meta holds another incarnation: then no delete can fill it.

Idempotency records (``KEYS`` named ``idem``) are hashes ``{op, h, ...}``: the operation,
a hash of the request's body, and what the first request did. A record with another
``op`` or ``h`` is a key reused for a different request.

The scripts of the API keys (:mod:`storage.auth`) are a family of their own, in
``storage/lua/auth``, loaded the same way into :data:`AUTH_SCRIPTS`. Each touches the keys
of the hash tag ``{auth}`` or one key's rate buckets (``{rate:<key id>}``), never both.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "AUTH_LUA",
    "AUTH_SCRIPTS",
    "CURVE_POINTS",
    "LUA",
    "MARKS",
    "SCRIPTS",
    "WINDOW_POINTS",
    "WINDOW_STEP",
    "Script",
    "load",
]

CURVE_POINTS = 512  # the mistake curve keeps at most this many points
WINDOW_STEP, WINDOW_POINTS = 10, 101  # the sliding window: the last 1,000 trials
MARKS = 64  # the changes of a model its meta lists, the latest

# what every script sees as Lua locals
_CONSTANTS = {
    "CURVE_POINTS": CURVE_POINTS,
    "MARKS": MARKS,
    "WINDOW_POINTS": WINDOW_POINTS,
    "WINDOW_STEP": WINDOW_STEP,
}
LUA = Path(__file__).resolve().parent / "lua"  # the script files, shipped as package data
AUTH_LUA = LUA / "auth"  # the API keys' family (storage.auth)
_PRELUDES = re.compile(r"-- prelude: (none|[a-z_]+(?:, [a-z_]+)*)\n")


@dataclass(frozen=True, slots=True)
class Script:
    """A script as Redis runs it: ``text`` (the constants, its preludes and its file)
    and the SHA1 Redis knows it by."""

    name: str
    preludes: tuple[str, ...]
    text: str
    sha: str


def load(name: str, folder: Path = LUA) -> Script:
    """The script of ``<folder>/<name>.lua`` (``name`` in lower case there): ``folder``
    is ``storage/lua`` or a family's folder in it (:data:`AUTH_LUA`)."""
    path = folder / f"{name.lower()}.lua"
    body = path.read_text(encoding="utf-8")
    m = _PRELUDES.match(body)
    if m is None:
        where = path.relative_to(LUA.parent.parent).as_posix()
        raise ValueError(f"{where}: its first line must be '-- prelude: ...'")
    preludes = () if m[1] == "none" else tuple(m[1].split(", "))
    parts = ["".join(f"local {k} = {v}\n" for k, v in _CONSTANTS.items())]
    for p in preludes:
        parts.append((LUA / "prelude" / f"{p}.lua").read_text(encoding="utf-8"))
    parts.append(body)
    text = "".join(parts)
    return Script(name, preludes, text, hashlib.sha1(text.encode()).hexdigest())


def _load_all(folder: Path = LUA) -> dict[str, Script]:
    names = sorted(f.stem.upper() for f in folder.glob("*.lua"))
    return {name: load(name, folder) for name in names}


#: every script, by its file's name in upper case ("PREDICT")
SCRIPTS = _load_all()
#: the API keys' scripts, from ``storage/lua/auth``, by name likewise ("TAKE")
AUTH_SCRIPTS = _load_all(AUTH_LUA)
