"""Each benchmark's table in ``docs/benchmarks.rst``, and its plot.

A benchmark run as ``python bench/<name>.py`` (its documented command: no option but
``--plot``) rewrites its table on the page, between the markers ``.. begin <name>
results`` and ``.. end <name> results``: each figure it printed that has a target, the
ones it names as information, and its headline (its last line), with the run's time and
command. A run with other options (``--quick``, fewer trials) prints only.

``--plot [PNG]`` also draws the table's figures, one panel each with its target, into
``PNG`` (default ``docs/_static/bench/<name>.png``, which the table then shows). It needs
matplotlib (the ``experiments`` extra, which ``./run`` installs).

Figures are read from what the benchmark prints, ``name: value`` lines, a target after
them as ``(target >= 0.6: met)``; the benchmark wraps its ``main()`` in :func:`recorded`.
"""

from __future__ import annotations

import fnmatch
import io
import re
import sys
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from app.service.warmup import place_worker_cache

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "benchmarks.rst"
PLOTS = ROOT / "docs" / "_static" / "bench"
_LINE = re.compile(
    r"(?P<name>[A-Za-z_][\w.-]*): (?P<value>-?[\d,]*\.?\d+)"
    r"(?: \((?P<note>[^)]*)\))?(?: \[(?P<spread>[^\]]*)\])?\s*"
)
_TARGET = re.compile(r"target (?P<op>>=|<=) (?P<bound>[\d,.]+)")


@dataclass(frozen=True)
class Figure:
    """One printed figure: its name, value and target (``op``, ``bound``; None when it
    has none)."""

    name: str
    value: float
    text: str
    op: str | None = None
    bound: float | None = None

    @property
    def target(self) -> str:
        return "information" if self.op is None else f"{self.op} {self.bound:,g}"

    @property
    def met(self) -> bool | None:
        if self.op is None or self.bound is None:
            return None
        return self.value >= self.bound if self.op == ">=" else self.value <= self.bound


def target_line(
    name: str, value: float, targets: dict[str, tuple[str, float]], rounds: Sequence[float] = ()
) -> str:
    """``name: value`` as a benchmark prints it: how far its rounds spread, and its target
    in ``targets`` (``(op, bound)``) with whether it was met."""
    text = f"{name}: {value:.2f}"
    if len(rounds) > 1:
        text += f" [rounds spread {(max(rounds) - min(rounds)) / max(rounds):.0%}]"
    target = targets.get(name)
    if target is None:
        return text
    op, bound = target
    met = value >= bound if op == ">=" else value <= bound
    return f"{text} (target {op} {bound:g}: {'met' if met else 'MISSED'})"


def figures(printed: str) -> list[Figure]:
    """The ``name: value`` lines of ``printed``, in order."""
    out = []
    for line in printed.splitlines():
        m = _LINE.fullmatch(line.strip())
        if m is None:
            continue
        value = m["value"].replace(",", "")
        target = _TARGET.search(m["note"] or "")
        out.append(
            Figure(
                m["name"],
                float(value),
                m["value"],
                target["op"] if target else None,
                float(target["bound"].replace(",", "")) if target else None,
            )
        )
    return out


def chosen(
    found: list[Figure],
    information: Collection[str] = (),
    targets: Mapping[str, tuple[str, float]] | None = None,
) -> list[Figure]:
    """The table's rows: figures with a target (printed, or given in ``targets`` for one
    printed without), those ``information`` matches (names or ``fnmatch`` patterns), and
    the headline (the last one), each once, in the printed order."""
    given = targets or {}
    found = [
        Figure(f.name, f.value, f.text, *given[f.name]) if f.name in given else f for f in found
    ]
    keep = {f.name for f in found if f.op is not None}
    keep |= {f.name for f in found if any(fnmatch.fnmatchcase(f.name, p) for p in information)}
    if found:
        keep.add(found[-1].name)
    latest = {f.name: f for f in found}  # a figure printed twice: its last value
    seen: list[Figure] = []
    for f in found:
        if f.name in keep and all(s.name != f.name for s in seen):
            seen.append(latest[f.name])
    return seen


def region(name: str, rows: list[Figure], command: str, image: str | None) -> str:
    """The marked region of ``name`` on the page: its latest run and its table."""
    out = [
        f".. begin {name} results (rewritten by {command})",
        "",
        f"Latest run: ``{command}``.",
        "",
        ".. list-table::",
        "   :header-rows: 1",
        "",
        "   * - figure",
        "     - latest run",
        "     - target",
    ]
    for f in rows:
        met = {None: "", True: " (met)", False: " (missed)"}[f.met]
        out += [f"   * - ``{f.name}``", f"     - {f.text}", f"     - {f.target}{met}"]
    if image is not None:
        out += ["", f".. image:: {image}", f"   :alt: {name}: each figure beside its target"]
    out += ["", f".. end {name} results"]
    return "\n".join(out) + "\n"


def rewrite(name: str, text: str, page: Path = PAGE) -> None:
    """Put ``text`` in place of ``name``'s marked region of ``page`` (at its end when the
    page has none)."""
    rewrite_region(page, f".. begin {name} results", f".. end {name} results", text)


def rewrite_region(page: Path, begin: str, end: str, text: str) -> None:
    """Put ``text`` in place of the region of ``page`` from the line ``begin`` to the line
    ``end`` (at its end when the page has none)."""
    old = page.read_text() if page.exists() else ""
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        tail = rest.split(end, 1)[1].lstrip("\n")
        new = head + text + ("\n" + tail if tail else "")
    else:
        new = old.rstrip("\n") + ("\n\n" if old else "") + text
    page.write_text(new)


def plot(name: str, rows: list[Figure], path: Path) -> None:
    """One horizontal bar per figure, each panel on its own scale, its target a dashed
    line; green when met, red when missed, grey for information."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(rows), 1, figsize=(7, 0.55 * len(rows) + 0.6), squeeze=False)
    for ax, f in zip(axes[:, 0], rows, strict=True):
        colour = {None: "0.6", True: "tab:green", False: "tab:red"}[f.met]
        ax.barh([0], [f.value], color=colour, height=0.6)
        top = max(f.value, f.bound or 0.0) * 1.5 or 1.0  # room for the label
        if f.bound is not None:
            ax.axvline(f.bound, color="black", linestyle="--", linewidth=1)
        ax.set_xlim(0, top)
        ax.set_yticks([0], [f.name], fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.text(f.value, 0, f" {f.text} ({f.target})", va="center", fontsize=7)
    fig.suptitle(f"python bench/{name}.py: latest run", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


class _Tee(io.TextIOBase):
    """Writes through to ``out`` and keeps a copy."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.kept = out, io.StringIO()

    def write(self, s: str) -> int:
        self.kept.write(s)
        return self.out.write(s)

    def flush(self) -> None:
        self.out.flush()


def _take_plot(argv: list[str], name: str) -> Path | None:
    """Remove ``--plot [PNG]`` from ``argv``; the PNG it names (its default without one)."""
    if "--plot" not in argv:
        return None
    at = argv.index("--plot")
    del argv[at]
    if at < len(argv) and argv[at].endswith(".png"):
        return Path(argv.pop(at)).resolve()
    return PLOTS / f"{name}.png"


@contextmanager
def recorded(
    name: str,
    information: Collection[str] = (),
    targets: Mapping[str, tuple[str, float]] | None = None,
) -> Iterator[None]:
    """Run the benchmark ``name`` inside: take its ``--plot`` option from ``sys.argv``,
    keep what it prints, and when it ends well write its table (a run of its documented
    command) and its plot (``--plot``); ``information`` and ``targets`` as
    :func:`chosen` takes them."""
    place_worker_cache()  # the kernels `committee warm` compiled, not numba's default's
    png = _take_plot(sys.argv, name)
    full = len(sys.argv) == 1
    helped = any(a in ("-h", "--help") for a in sys.argv[1:])
    tee = _Tee(sys.stdout)
    sys.stdout = tee
    try:
        yield
    finally:
        sys.stdout = tee.out
        if helped:  # after the benchmark's own options, the one taken here
            print(
                "\n  --plot [PNG]    also draw each figure beside its target, to PNG "
                f"(default {PLOTS.relative_to(ROOT)}/{name}.png)"
            )
    rows = chosen(figures(tee.kept.getvalue()), information, targets)
    if png is not None and rows:
        plot(name, rows, png)
    if full:
        command = f"python bench/{name}.py" + (" --plot" if png is not None else "")
        shown = png is not None and png == PLOTS / f"{name}.png"
        image = f"_static/bench/{name}.png" if shown else None
        rewrite(name, region(name, rows, command, image))
