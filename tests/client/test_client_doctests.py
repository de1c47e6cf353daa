"""The client's docstring examples (the suite's doctest paths don't include client/)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import client

MODULES = ["client", *(f"client.{m.name}" for m in pkgutil.iter_modules(client.__path__))]


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), raise_on_error=False)
    assert result.failed == 0
