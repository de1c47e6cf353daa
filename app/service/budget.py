"""What one model may cost: its labels, its spec and the memory its learner will hold.

Every bound is a setting (:class:`app.core.settings.Settings`) and is checked from the config
alone, before anything of the model's size is allocated; a refusal is a
:class:`~app.core.errors.BadInput` naming the field and the setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.errors import BadInput
from app.core.settings import Settings
from models.budget import check_spec, estimate_bytes
from models.core.params import InvalidParameter

__all__ = ["Limits", "check_labels", "check_learner", "readable_bytes"]


@dataclass(frozen=True, slots=True)
class Limits:
    labels: int = 1_024
    label_length: int = 256
    learner_bytes: int = 256 * 1024 * 1024
    learners: int = 512
    spec_depth: int = 8
    derived_experts: int = 4_096

    @classmethod
    def of(cls, s: Settings) -> Limits:
        return cls(
            s.max_labels,
            s.max_label_length,
            s.max_learner_bytes,
            s.max_learners,
            s.max_spec_depth,
            s.max_derived_experts,
        )


def readable_bytes(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def check_labels(labels: list[Any], limits: Limits) -> None:
    if len(labels) > limits.labels:
        raise BadInput(
            "labels", f"{len(labels)} labels: expected at most {limits.labels} (max_labels)"
        )
    for i, label in enumerate(labels):
        if isinstance(label, str) and len(label) > limits.label_length:
            raise BadInput(
                f"labels.{i}",
                f"a label of {len(label)} characters: expected at most {limits.label_length} "
                "(max_label_length)",
            )


def check_learner(
    spec: Any, labels: list[Any], size: int, limits: Limits, active: int | None = None
) -> int:
    """Check a learner spec's shape and its estimated bytes, for instances of at most
    ``active`` non-zeros (None: dense); returns the estimate."""
    try:
        check_spec(spec, max_depth=limits.spec_depth, max_learners=limits.learners, labels=labels)
        need = estimate_bytes(spec, labels=labels, size=size, max_nonzeros=active)
    except InvalidParameter as e:
        raise BadInput(f"learner.{e.name}" if e.name else "learner", str(e)) from None
    if need > limits.learner_bytes:
        hint = "" if active else "; sparse instances need less: set max_active"
        raise BadInput(
            "learner",
            f"this learner would hold about {readable_bytes(need)} for {size} inputs and "
            f"{len(labels)} labels: expected at most {readable_bytes(limits.learner_bytes)} "
            f"(max_learner_bytes){hint}",
        )
    return need
