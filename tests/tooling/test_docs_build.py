"""The documentation builds with Sphinx, warnings as errors; its generated pages cover
every learner kind and every route of the API, and the hand-written page of costs and
readings has a section for every learner kind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from app.core.settings import Settings
from app.http.main import create_app
from models.registry import KINDS

DOCS = Path(__file__).resolve().parents[2] / "docs"
SPEC = "ALGORITHMS" + ".md"  # the implementers' specification (named only so here)


def _section_ids(html: str) -> set[str]:
    """The ids of a page's sections (Sphinx derives each from its title)."""
    return set(re.findall(r'<section id="([^"]+)"', html))


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
    html = tmp_path / "html"
    learners = (html / "_generated" / "learners.html").read_text()
    for kind in KINDS:
        assert f'id="{kind}"' in learners, kind
    assert SPEC not in learners  # a reader has no such file
    api = (html / "_generated" / "api.html").read_text()
    doc = create_app(Settings(redis_url="redis://127.0.0.1:1/0")).openapi()
    for path, ops in doc["paths"].items():
        for method in ops:
            assert f"{method.upper()} {path}" in api, (method, path)
    assert (html / "guarantees.html").exists()

    # Costs and readings: one section per kind, titled by the kind's name.
    readings = (html / "readings.html").read_text()
    missing = [kind for kind in KINDS if kind not in _section_ids(readings)]
    assert not missing, f"readings.html has no section for {missing}"
    table1 = (html / "table1.html").read_text()
    assert {"table-i-and-figure-5-reproduced", "table-i-as-measured", "figure-5"} <= (
        _section_ids(table1)
    )
    for name, page in (("readings", readings), ("table1", table1)):
        assert SPEC not in page, name  # a reader has no such file


def test_no_file_of_the_project_sends_a_reader_to_the_specification() -> None:
    """The implementers' specification is not part of the project: the code, its docs and
    its tests cite the papers and the project's own pages."""
    root = DOCS.parent
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    citing = [
        name
        for name in tracked
        if name.endswith((".py", ".rst", ".md", ".js", ".html", ".toml"))
        and (root / name).exists()  # tracked, but deleted in the working tree
        and SPEC in (root / name).read_text(errors="replace")
    ]
    assert citing == []
