"""The import structure: import-linter's contracts hold, and no import circle exists anywhere,
function-level imports included."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("models", "storage", "app", "experiments", "committee_client")
SOURCES = {
    "models": ROOT / "models",
    "storage": ROOT / "storage",
    "app": ROOT / "app",
    "experiments": ROOT / "experiments",
    "committee_client": ROOT / "client" / "committee_client",
}


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_the_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_no_import_circle() -> None:
    assert _cycles(grimp.build_graph(*PACKAGES)) == []


def test_the_circle_finder_sees_a_circle() -> None:
    graph = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        graph.add_import(importer=a, imported=b)
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]


def _function_imports(path: Path) -> list[str]:
    """Imports of the project's own modules made inside a function."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(func):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = ["." if node.level else (node.module or "")]
            for name in names:
                if name == "." or name.split(".")[0] in PACKAGES:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    return found


def test_no_function_level_import_of_the_project() -> None:
    found = [
        hit
        for source in SOURCES.values()
        for path in sorted(source.rglob("*.py"))
        for hit in _function_imports(path)
    ]
    assert found == []


def _private_imports(path: Path) -> list[str]:
    """Names with a leading underscore imported from another module of the project."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                # a package's private module, imported by a module of that package, is its own
                inside = path.parent.name == node.module.split(".")[-1]
                if private and not inside:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {alias.name}")
    return found


def test_no_private_name_crosses_modules() -> None:
    found = [
        hit
        for source in SOURCES.values()
        for path in sorted(source.rglob("*.py"))
        for hit in _private_imports(path)
    ]
    assert found == []
