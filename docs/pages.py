"""Pages of the documentation generated from the code at build time, so that they never
fall behind it: every learner kind (from the registry's own description and its module's
docstring) and every route of the API with its answers (from the app's OpenAPI document).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from app.core.settings import Settings
from app.http.main import create_app
from models.registry import KINDS, describe


def _title(text: str, mark: str) -> str:
    return f"{text}\n{mark * len(text)}\n"


def _table(header: list[str], rows: list[list[str]]) -> str:
    out = [".. list-table::", "   :header-rows: 1", ""]
    for row in [header, *rows]:
        out.append(f"   * - {row[0]}")
        out += [f"     - {cell}" for cell in row[1:]]
    return "\n".join(out) + "\n"


def _literal(value: Any) -> str:
    text = "null" if value is None else repr(value).replace("'", '"')
    if isinstance(value, bool):
        text = "true" if value else "false"
    return f"``{text}``"


def _docstring(kind: str) -> str:
    """The learner's class docstring (its rule and parameters), then its module's."""
    cls = KINDS[kind]
    parts = [inspect.getdoc(cls) or "", inspect.getdoc(inspect.getmodule(cls)) or ""]
    doc = "\n\n".join(p for p in parts if p)
    return doc


def learners_page() -> str:
    out = [_title("Learners", "=")]
    out.append(
        "Every kind a model's ``learner`` may name, with its parameters as the service "
        "checks them (a parameter marked *from the model* is filled in from the model's "
        "labels and input), then its module's own account: the update rule, the readings "
        "chosen where the papers leave a choice, and the cost of a trial.\n"
    )
    for d in describe():
        out.append(_title(d["kind"], "-"))
        out.append(f"{d['summary']} Input: {d['input']}.\n")
        rows = [
            [
                f"``{p['name']}``",
                "from the model" if p["context"] else _literal(p["default"]),
                p["expected"],
            ]
            for p in d["parameters"]
        ]
        out.append(_table(["parameter", "default", "expected"], rows))
        doc = _docstring(d["kind"])
        if doc:
            out.append("::\n")
            out.append("\n".join(f"    {line}" if line else "" for line in doc.splitlines()))
            out.append("")
    return "\n".join(out) + "\n"


def api_page() -> str:
    doc = create_app(Settings(redis_url="redis://127.0.0.1:1/0")).openapi()
    out = [_title("The HTTP API", "=")]
    out.append(
        "Every route, its purpose and every status it answers; an error answer is "
        '``{"detail": ...}`` naming the field and the limit. The service serves the full '
        "OpenAPI document at ``/openapi.json`` and renders it at ``/docs`` and ``/redoc``. "
        "The WebSocket ``/v1/models/{name}/stream`` takes the same trial calls as messages.\n"
    )
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            out.append(_title(f"{method.upper()} {path}", "-"))
            text = (op.get("description") or op.get("summary") or "").strip()
            if text:
                out.append(text.split("\n\n")[0].replace("\n", " ") + "\n")
            rows = [
                [f"``{code}``", (r.get("description") or "").replace("\n", " ")]
                for code, r in sorted(op.get("responses", {}).items())
            ]
            out.append(_table(["status", "when"], rows))
    return "\n".join(out) + "\n"


def write(into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    for name, text in (("learners.rst", learners_page()), ("api.rst", api_page())):
        path = into / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
