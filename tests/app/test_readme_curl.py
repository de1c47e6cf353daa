"""The README's curl session runs as written against the real service."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def commands() -> list[tuple[str, str]]:
    """Each curl command of the sh blocks, with the comment line that follows it."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.S):
        for cmd, comment in re.findall(r"(curl .*?)(?:\n(?=curl|#)|\Z)(#[^\n]*)?", block, re.S):
            out.append((cmd.strip(), comment.lstrip("# ").strip()))
    return out


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_curl_session(api_url: str) -> None:
    cmds = commands()
    assert len(cmds) == 4
    for cmd, expected in cmds:
        run = subprocess.run(
            ["bash", "-c", cmd.replace("localhost:8000", api_url.removeprefix("http://"))],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        got = json.loads(run.stdout)
        if expected.startswith("{"):
            want = json.loads(expected)
            for key, value in want.items():
                if isinstance(value, dict):
                    for k, v in value.items():
                        assert got[key][k] == pytest.approx(v, abs=0.01), (key, k)
                else:
                    assert got[key] == value, (key, got)
    assert got["version"] == 1 and got["counters"]["labelled"] == 1
