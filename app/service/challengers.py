"""A model's shadow challengers: attached, read, promoted and retired.

Each operation is one change entry in the model's log (see :mod:`app.service.challenger`
for what a challenger is and counts), written only if the model's challengers are still
those the request was checked against: the stored input names them, and the change
script refuses a write checked against another input (the caller catches up and checks
again). Their figures are read from this worker's copy once it has caught up with the
log, so every worker answers alike.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from app.core.errors import BadInput, ChallengerNotFound
from app.core.settings import Settings
from app.service.budget import check_learner, readable_bytes
from app.service.live_model import LiveModel
from app.service.replicas import LIMIT, Replicas
from storage.errors import Conflict
from storage.keys import valid_name
from storage.repository import Idempotency, ModelStore

__all__ = ["Challengers"]

TRIES = 5  # writes refused because the model moved on, before giving up (409)


class Challengers:
    """The challengers of the models this worker serves."""

    def __init__(self, store: ModelStore, replicas: Replicas, settings: Settings) -> None:
        self.store, self.replicas, self.settings = store, replicas, settings

    async def attach(
        self, name: str, challenger: str, spec: Any, idem: Idempotency | None = None
    ) -> int:
        """Attach learner ``spec`` as challenger ``challenger`` of model ``name``: it sees
        the trials after the entry this writes (its seq, returned).

        Raises :class:`BadInput` naming the field for a name taken or malformed, a learner
        that cannot learn from the model's input, or one beyond ``max_challengers`` or
        ``max_learner_bytes`` (with the model's learner and other challengers).
        """

        def check(m: LiveModel) -> None:
            if not valid_name(challenger):
                raise BadInput("name", "expected 1-64 of A-Z a-z 0-9 _ . - (first not . _ -)")
            if challenger in m.challengers:
                raise BadInput("name", f"{challenger!r}: the model has a challenger of that name")
            most = self.settings.max_challengers
            if len(m.challengers) >= most:
                raise BadInput(
                    "name",
                    f"the model has {len(m.challengers)} challengers: at most {most} "
                    "(max_challengers)",
                )
            m.challenger(challenger, spec, m.version + 1)  # it can be built for this input
            self._check_bytes(m, spec)

        doc = {"op": "attach", "name": challenger, "learner": spec}
        return await self._write(name, doc, check, f"+challenger {challenger}", idem)

    async def retire(self, name: str, challenger: str, idem: Idempotency | None = None) -> int:
        """Retire challenger ``challenger``; the seq of the entry that does."""
        doc = {"op": "retire", "name": challenger}
        return await self._write(
            name, doc, self._known(challenger), f"-challenger {challenger}", idem
        )

    async def promote(self, name: str, challenger: str, idem: Idempotency | None = None) -> int:
        """Make challenger ``challenger``, as it is at the entry this writes, the model's
        learner (the one it replaces is gone; a rollback to a version before brings both
        back); the entry's seq."""
        doc = {"op": "promote", "name": challenger}
        return await self._write(name, doc, self._known(challenger), f"promoted {challenger}", idem)

    async def read(self, name: str) -> dict[str, Any]:
        """The model's challengers' figures, beside the live learner's on the same
        trials, as of its latest version."""
        m = await self.replicas.fresh(name)
        return {
            "model": name,
            "version": m.version,
            "learner": m.config["learner"],
            "challengers": [c.figures() for c in m.challengers.values()],
        }

    @staticmethod
    def _known(challenger: str) -> Any:
        def check(m: LiveModel) -> None:
            if challenger not in m.challengers:
                raise ChallengerNotFound(f"model {m.name!r} has no challenger {challenger!r}")

        return check

    def _check_bytes(self, m: LiveModel, spec: dict[str, Any]) -> None:
        """The learner budget holds the model's learner and all its challengers."""
        limits = self.replicas.limits
        labels, size, active = list(m.space.labels), m.size, m.max_active
        specs = [m.config["learner"], *(c.spec for c in m.challengers.values()), spec]
        need = 0
        for s in specs:
            need += check_learner(s, labels, size, limits, active)
        if need > limits.learner_bytes:
            raise BadInput(
                "learner",
                f"with the model's learner and challengers it would hold about "
                f"{readable_bytes(need)}: expected at most "
                f"{readable_bytes(limits.learner_bytes)} (max_learner_bytes)",
            )

    async def _write(
        self, name: str, doc: dict[str, Any], check: Any, what: str, idem: Idempotency | None
    ) -> int:
        """Append the change entry ``{"challenger": doc}`` once ``check`` passes on the
        model as it is; its seq."""
        raw = orjson.dumps({"challenger": doc})
        for _ in range(TRIES):
            m = await self.replicas.fresh(name)
            if idem is not None:  # a retry of a write made: the first answer
                seq = await self.store.earlier(name, m.incarnation, idem, "change")
                if seq is not None:
                    return seq
            async with m.frozen():  # a learner built to check the spec, off the event loop
                await asyncio.to_thread(check, m)
            names = list(m.challengers)
            promoted: dict[str, Any] | bool | None = True
            if doc["op"] == "attach":
                names.append(doc["name"])
            else:
                names.remove(doc["name"])
                if doc["op"] == "promote":
                    promoted = m.challengers[doc["name"]].spec
            sync, seq = await self.store.change(
                name,
                m.incarnation,
                m.version,
                raw,
                m.space_doc(promoted, names),
                (m.k, m.size),
                m.fold_payload(),
                LIMIT,
                checked=m.space_doc(),
                what=what,
                idem=idem,
                keep_ms=m.ttl_ms,
                seen=m.stamp,
            )
            if sync is None:
                await self.replicas.fresh(name)  # this worker applies it before answering
                return seq
            await self.replicas.catch_up(m, sync)
        raise Conflict(f"model {name!r} kept changing: send the request again")
