"""Model names, trial ids and Idempotency-Keys as pydantic types, each checked by the one
definition :mod:`storage.keys` gives of it (its ``valid_*`` function) and documented by
the pattern it gives beside it.

A refused string is answered as pydantic answers a mismatch of a ``pattern``. The trial
calls check a name and a key in their handlers (:mod:`app.http.routers.common`), with the same
functions; their routes declare them with the ``*Text`` types, which only document.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from storage.keys import (
    IDEMPOTENCY_KEY_PATTERN,
    NAME_PATTERN,
    TRIAL_ID_PATTERN,
    valid_idempotency_key,
    valid_name,
    valid_trial_id,
)

__all__ = ["IdempotencyKey", "IdempotencyKeyText", "Name", "NameText", "Pattern", "TrialId"]


@dataclass(frozen=True, slots=True)
class Pattern:
    """A string documented by its JSON Schema ``pattern``; with ``valid``, validated by it
    too."""

    pattern: str
    valid: Callable[[object], bool] | None = None

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        schema = handler(source)
        if self.valid is None:
            return schema
        return core_schema.no_info_after_validator_function(self._check, schema)

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {**handler(schema), "pattern": self.pattern}

    def _check(self, value: str) -> str:
        if self.valid is not None and not self.valid(value):
            raise PydanticCustomError(
                "string_pattern_mismatch",
                "String should match pattern '{pattern}'",
                {"pattern": self.pattern},
            )
        return value


Name = Annotated[str, Pattern(NAME_PATTERN, valid_name)]
TrialId = Annotated[str, Pattern(TRIAL_ID_PATTERN, valid_trial_id)]
IdempotencyKey = Annotated[str, Pattern(IDEMPOTENCY_KEY_PATTERN, valid_idempotency_key)]
NameText = Annotated[str, Pattern(NAME_PATTERN)]
IdempotencyKeyText = Annotated[str, Pattern(IDEMPOTENCY_KEY_PATTERN)]
