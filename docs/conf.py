"""Sphinx configuration: ``python -m sphinx -W -b html docs docs/_build``."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import pages  # noqa: E402

project = "Committee"
author = "the Committee authors"
copyright = "2026, the Committee authors"
html_theme = "alabaster"
exclude_patterns = ["_build"]
pages.write(HERE / "_generated")
