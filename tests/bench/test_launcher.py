"""The benchmarks' server launcher survives a port taken between its choice and the bind."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH_DIR))

import service  # noqa: E402


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port some other process listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def _echo(tmp_path: Path) -> AbstractContextManager[service.Server]:
    return service.uvicorn(
        "echo",
        ["_ws_echo:app", "--app-dir", str(BENCH_DIR)],
        {},
        tmp_path,
        lambda h: h.get("/healthz").status_code == 200,
    )


def test_a_taken_port_is_given_up_for_another(
    taken: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = iter([taken])
    free = service.free_port
    monkeypatch.setattr(service, "free_port", lambda: next(chosen, None) or free())
    with _echo(tmp_path) as server:
        assert server.port != taken
        assert httpx.get(f"{server.url}/healthz").text == "ok"


def test_a_port_taken_every_time_ends_in_a_clear_error(
    taken: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "free_port", lambda: taken)
    with pytest.raises(RuntimeError, match="no free port in 5 attempts"), _echo(tmp_path):
        pass
