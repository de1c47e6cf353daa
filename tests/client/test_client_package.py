"""The client is a distribution of its own: its wheel holds ``committee_client`` alone and
requires httpx, pydantic and websockets only, the service's wheel holds no client, and the
client imports without the service or the service's dependencies.

The wheels are built offline (``--no-index --no-build-isolation``) from copies of the
tree, so no build output lands in it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "committee_client"
CLIENT_REQUIRES = {"httpx", "pydantic", "websockets"}
# what an application that only calls the service must not have to install or import
REFUSED = ["numba", "fastapi", "uvicorn", "numpy", "app", "models", "storage"]
BUILD_OUTPUT = {"__pycache__", "build", "dist", "committee-data"}

PROBE = """
import importlib, importlib.abc, pkgutil, sys

REFUSED = set(sys.argv[2].split(","))
early = sorted(n for n in sys.modules if n.partition(".")[0] in REFUSED)
assert not early, f"imported before the client: {early}"


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"refused: {name}", name=name)
        return None


sys.meta_path.insert(0, Refuse())
sys.path.insert(0, sys.argv[1])
import committee_client

assert committee_client.__file__.startswith(sys.argv[1]), committee_client.__file__
for m in pkgutil.iter_modules(committee_client.__path__):
    importlib.import_module(f"committee_client.{m.name}")
try:
    import numpy
except ModuleNotFoundError:
    pass
else:
    raise AssertionError("the finder let numpy through")
"""


def skipped(folder: str, names: list[str]) -> set[str]:
    """What a copy of the tree leaves out: hidden entries (environments, caches), build
    output, and anything but folders and plain files (a Redis socket)."""
    return {
        n
        for n in names
        if n.startswith(".")
        or n in BUILD_OUTPUT
        or n.endswith(".egg-info")
        or not (Path(folder, n).is_dir() or Path(folder, n).is_file())
    }


def build_wheel(source: Path, work: Path) -> Path:
    """The wheel pip builds, without the network, from a copy of ``source``."""
    copy, out = work / source.name, work / "out"
    shutil.copytree(source, copy, ignore=skipped)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    command += ["--no-index", "-q", str(copy), "-w", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("*.whl")
    return wheel


def requirement_names(wheel: zipfile.ZipFile) -> set[str]:
    (path,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    metadata = Parser().parsestr(wheel.read(path).decode())
    requires = metadata.get_all("Requires-Dist") or []
    return {re.split(r"[\s;\[<>=!~(]", r, maxsplit=1)[0].lower() for r in requires}


@pytest.fixture(scope="module")
def client_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(ROOT / "client", tmp_path_factory.mktemp("client-wheel"))


@pytest.fixture(scope="module")
def service_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(ROOT, tmp_path_factory.mktemp("service-wheel"))


def test_the_client_wheel_holds_the_client_alone(client_wheel: Path) -> None:
    with zipfile.ZipFile(client_wheel) as wheel:
        names = wheel.namelist()
        tops = {n.split("/", 1)[0] for n in names}
        (info,) = tops - {PACKAGE}
        assert info.startswith(f"{PACKAGE}-") and info.endswith(".dist-info")
        modules = {Path(n).name for n in names if n.startswith(f"{PACKAGE}/")}
        sources = {p.name for p in (ROOT / "client" / PACKAGE).glob("*.py")}
        assert modules == sources | {"py.typed"}
        assert requirement_names(wheel) == CLIENT_REQUIRES


def test_the_service_wheel_ships_no_client(service_wheel: Path) -> None:
    with zipfile.ZipFile(service_wheel) as wheel:
        tops = {n.split("/", 1)[0] for n in wheel.namelist()}
    assert "app" in tops and "models" in tops and "storage" in tops
    assert not tops & {"client", PACKAGE}


def test_the_client_imports_without_the_service(client_wheel: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-I", "-c", PROBE, str(client_wheel), ",".join(REFUSED)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
