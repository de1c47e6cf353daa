"""The client's docstring examples (the suite's doctest paths don't include client/)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import committee_client

SOURCE = Path(__file__).resolve().parents[2] / "client" / "committee_client"
MODULES = [
    "committee_client",
    *(f"committee_client.{m.name}" for m in pkgutil.iter_modules(committee_client.__path__)),
]


def test_every_module_of_this_tree_is_examined() -> None:
    assert Path(committee_client.__file__ or "").resolve().parent == SOURCE
    files = {p.stem for p in SOURCE.glob("*.py")} - {"__init__"}
    assert set(MODULES) == {"committee_client", *(f"committee_client.{f}" for f in files)}


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module: str) -> None:
    imported = importlib.import_module(module)
    result = doctest.testmod(imported, raise_on_error=False)
    assert result.failed == 0
    if ">>>" in Path(imported.__file__ or "").read_text():
        assert result.attempted > 0, f"{module} has examples that doctest did not find"
