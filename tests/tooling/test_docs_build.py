"""The documentation builds with Sphinx, warnings as errors, and its generated pages cover
every learner kind and every route of the API."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from app.config import Settings
from app.main import create_app
from models.registry import KINDS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_docs_build_without_a_warning_and_cover_the_code(tmp_path: Path) -> None:
    build = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
    done = subprocess.run(
        [*build, str(DOCS), str(tmp_path / "html")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    learners = (tmp_path / "html" / "_generated" / "learners.html").read_text()
    for kind in KINDS:
        assert f'id="{kind}"' in learners, kind
    assert "ALGORITHMS.md" not in learners  # a reader has no such file
    api = (tmp_path / "html" / "_generated" / "api.html").read_text()
    doc = create_app(Settings(redis_url="redis://127.0.0.1:1/0")).openapi()
    for path, ops in doc["paths"].items():
        for method in ops:
            assert f"{method.upper()} {path}" in api, (method, path)
    assert (tmp_path / "html" / "guarantees.html").exists()
