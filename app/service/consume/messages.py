"""A message from a stream, and the trial call it asks for.

A message is a ``predict``, ``label`` or ``learn`` whose body is the REST call's body, as
JSON; the source tells the model and the op beside it (Redis: the entry's ``model`` and
``op`` fields; NATS: the subject's last two tokens). :func:`read` checks it as the REST
call's body is checked and gives the call, or raises :class:`~app.core.errors.BadInput`
naming the field: such a message is dead-lettered with that reason.

Every call has an effect at most once however often its message is delivered: a tracked
``predict`` needs its ``trial_id`` (a redelivery then gets the prediction first served),
a ``label`` is applied once by its trial, and a ``learn`` carries an idempotency key, the
message's own ``key`` or one the source makes from the message's place in its stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from app.core.errors import BadInput
from app.core.settings import Settings
from app.service.model_service import body_digest
from storage.keys import (
    IDEMPOTENCY_KEY_PATTERN,
    NAME_PATTERN,
    TRIAL_ID_PATTERN,
    valid_idempotency_key,
    valid_name,
    valid_trial_id,
)
from storage.repository import Idempotency

__all__ = ["OPS", "Call", "Delivery", "ReadTrials", "read", "read_learns"]

# each op's body: (required members, optional members), as the REST call's
OPS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "predict": (frozenset({"instance"}), frozenset({"trial_id", "track"})),
    "label": (frozenset({"trial_id", "label"}), frozenset()),
    "learn": (frozenset({"instance", "label"}), frozenset()),
}
# trial bodies read together, given their members and the required ones: their documents,
# or None when one is not plainly a trial (app.http.bodies.read_trials)
ReadTrials = Callable[
    [Sequence[bytes], frozenset[str], frozenset[str]], list[dict[str, Any]] | None
]
_FIELDS = {op: need | optional for op, (need, optional) in OPS.items()}  # each op's all
_INSTANCE = frozenset({"features", "experts"})
_INT64 = 2**63
_EXACT_FLOATS = 2**53  # the integers a float holds exactly (a label 2.0 is 2)


@dataclass(slots=True)
class Delivery:
    """One delivery of a message: ``id`` is its place in the source's stream (the same
    on every delivery), ``key`` the idempotency key of a learn (the message's own, or
    one made from ``id``), ``handle`` what the source acknowledges it by, ``deliveries``
    how often the broker has delivered it, this time included. ``model``, ``op`` and
    ``body`` are None when the message lacks them."""

    id: str
    model: str | None
    op: str | None
    body: bytes | None
    key: str
    handle: Any = None
    deliveries: int = 1


@dataclass(slots=True)
class Call:
    """A message read: the trial call of ``op`` on ``model`` with ``args`` (predict:
    instance and trial id; label: trial id and label; learn: instance and label)."""

    delivery: Delivery
    model: str
    op: str
    args: tuple[Any, Any]
    track: bool = True
    idem: Idempotency | None = None


def read(d: Delivery, settings: Settings) -> Call:
    """The call ``d`` asks for; :class:`BadInput` naming the field when it is malformed."""
    body = _envelope(d, settings)
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise BadInput("body", f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise BadInput("body", "expected a JSON object")
    assert d.model is not None and d.op is not None
    need, optional = OPS[d.op]
    if not (need <= doc.keys() <= _FIELDS[d.op]):
        for f in sorted(need - doc.keys()):
            raise BadInput(f, f"missing: {d.op} needs {', '.join(sorted(need))}")
        for f in sorted(doc.keys() - need - optional):
            raise BadInput(f, f"unknown field for {d.op}")
    label = _label(doc["label"], settings.max_label_length) if "label" in need else None
    trial_id = doc.get("trial_id")
    if trial_id is not None and not valid_trial_id(trial_id):
        raise BadInput("trial_id", f"{str(trial_id)[:80]!r}: expected {TRIAL_ID_PATTERN}")
    if d.op == "label":
        return Call(d, d.model, d.op, (trial_id, label))
    instance = _instance(doc["instance"])
    if d.op == "predict":
        track = doc.get("track", True)
        if not isinstance(track, bool):
            raise BadInput("track", "expected true or false")
        if track and trial_id is None:
            raise BadInput(
                "trial_id",
                "missing: a tracked predict from a stream needs a trial_id, so that a "
                "redelivery gets the prediction first served",
            )
        return Call(d, d.model, d.op, (instance, trial_id), track)
    return Call(d, d.model, d.op, (instance, label), idem=_learn_key(d))


def read_learns(
    ds: Sequence[Delivery], settings: Settings, read_trials: ReadTrials
) -> list[Call] | None:
    """The calls of the learn messages ``ds``, their bodies read together by
    ``read_trials`` (one compiled pass over them all); None when one of them is not
    plainly a learn (then :func:`read` each, which says what is wrong)."""
    try:
        bodies = [_envelope(d, settings) for d in ds]
    except BadInput:
        return None
    need, optional = OPS["learn"]
    docs = read_trials(bodies, need | optional, need)
    if docs is None:
        return None
    out = []
    for d, doc in zip(ds, docs, strict=True):
        try:
            y = _label(doc["label"], settings.max_label_length)
            idem = _learn_key(d)
        except BadInput:
            return None
        assert d.model is not None
        out.append(Call(d, d.model, "learn", (doc["instance"], y), idem=idem))
    return out


def _envelope(d: Delivery, settings: Settings) -> bytes:
    """``d``'s body, once its model, op and size are as a message's must be."""
    if d.model is None or not valid_name(d.model):
        shown = "missing" if d.model is None else repr(d.model[:80])
        raise BadInput("model", f"{shown}: expected a model name matching {NAME_PATTERN}")
    if d.op not in OPS:
        raise BadInput("op", f"{d.op!r}: expected one of {', '.join(map(repr, OPS))}")
    if d.body is None:
        raise BadInput("body", "missing: the REST call's JSON body")
    most = settings.consume_max_message_bytes
    if len(d.body) > most:
        raise BadInput(
            "body", f"{len(d.body)} bytes: expected at most {most} (consume_max_message_bytes)"
        )
    return d.body


def _learn_key(d: Delivery) -> Idempotency:
    """A learn's idempotency: its key, with the digest of the REST call's body (a key
    shared with an HTTP learn of the same body is the same request)."""
    if not valid_idempotency_key(d.key):
        raise BadInput("key", f"{d.key[:80]!r}: expected {IDEMPOTENCY_KEY_PATTERN}")
    assert d.model is not None and d.body is not None
    return Idempotency(d.key, body_digest("learn", d.model, d.body))


def _instance(x: Any) -> dict[str, Any]:
    """The instance as the service takes it, without the parts given as null."""
    if not isinstance(x, dict):
        raise BadInput("instance", "expected an object with features and/or experts")
    if not x.keys() <= _INSTANCE:
        for f in sorted(x.keys() - _INSTANCE):
            raise BadInput(f"instance.{f}", "unknown field: expected features and/or experts")
    return x if None not in x.values() else {k: v for k, v in x.items() if v is not None}


def _label(v: Any, most: int) -> str | int:
    """``v`` as a label: a string of at most ``most`` characters or a 64-bit integer."""
    if isinstance(v, str) and len(v) <= most:
        return v
    if type(v) is float and v.is_integer() and abs(v) <= _EXACT_FLOATS:
        v = int(v)
    if isinstance(v, int) and not isinstance(v, bool) and -_INT64 <= v < _INT64:
        return v
    raise BadInput("label", f"expected a string of at most {most} characters or a 64-bit integer")
