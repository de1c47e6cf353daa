"""``committee export`` and ``committee import``: a model's log out as NDJSON, and a
labelled history (NDJSON, one trial a line) into a model, over HTTP with the Python
client, so that they work against a remote service with an API key.

``export`` writes the log's entries after ``--from-version`` up to the model's version
when it starts (one page of ``max_log_entries`` at a time). ``import`` sends whole blocks
of 100 lines per request, each block appended at most once under the import's id: run
again after it stopped (killed, a lost connection), it asks the service where the import
stopped and goes on from there, and a block sent twice is not appended twice. The id is
``--import-id``, or one made from the model (its name and creation) and the file's first
block, so the same file imported into the same model finds its earlier run.

Both need the client (``pip install ./client``), which the service's own distribution
does not: they import it when they run.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import itertools
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from committee_client import Client, LogImport

DEFAULT_URL = "http://127.0.0.1:8000"
URL_VARIABLE = "COMMITTEE_URL"
BLOCK = 100  # lines per block of an import (see app.service.log_import)
ERRORS_SHOWN = 20  # refused lines printed one by one; the rest are counted


def add_parser(sub: Any) -> None:
    """Add ``export`` and ``import`` to the CLI's subcommands."""
    service = argparse.ArgumentParser(add_help=False)
    service.add_argument("--model", required=True, help="the model's name")
    service.add_argument("--url", help=f"the service [{URL_VARIABLE}, {DEFAULT_URL}]")
    service.add_argument("--api-key", help="[COMMITTEE_API_KEY; none]")
    service.add_argument("--quiet", action="store_true", help="no progress on standard error")
    service.add_argument(
        "--progress-every", type=float, default=1.0, help="seconds between progress lines [1]"
    )
    p = sub.add_parser("export", parents=[service], help="write a model's log as NDJSON")
    p.add_argument("--from-version", type=int, default=0, help="the version to start after [0]")
    p.add_argument("--to-version", type=int, help="the last version [the model's, at start]")
    p.add_argument("--output", "-o", type=Path, help="the file to write [standard output]")
    p.set_defaults(func=export)
    p = sub.add_parser(
        "import", parents=[service], help="replay a labelled history (NDJSON) into a model"
    )
    p.add_argument("file", help="NDJSON, one trial (or an export's entry) a line; - for stdin")
    p.add_argument("--import-id", help="[made from the model and the file's first lines]")
    p.add_argument(
        "--from-line", type=int, help="start at this line [where the service says it stopped]"
    )
    p.add_argument(
        "--lines-per-request",
        type=int,
        default=1_000,
        help=f"a multiple of {BLOCK}, within the service's max_import_lines [1000]",
    )
    p.set_defaults(func=import_file)


def _client_package() -> ModuleType:
    """The Python client, a distribution of its own (see above)."""
    try:
        return importlib.import_module("committee_client")
    except ImportError:
        raise SystemExit(
            "committee: export and import need the Python client: pip install ./client"
        ) from None


def _client(args: argparse.Namespace) -> Client:
    url = args.url or os.environ.get(URL_VARIABLE) or DEFAULT_URL
    c: Client = _client_package().Client(url, timeout=120.0, api_key=args.api_key)
    return c


class Progress:
    """One line on standard error, rewritten in place on a terminal, else written every
    ``every`` seconds (and at the end)."""

    def __init__(self, quiet: bool, every: float) -> None:
        self.quiet, self.every = quiet, every
        self.tty = sys.stderr.isatty()
        self.began = self.shown = time.monotonic()

    def show(self, text: str, last: bool = False) -> None:
        now = time.monotonic()
        if self.quiet or (not last and now - self.shown < self.every):
            return
        self.shown = now
        if self.tty:
            print(f"\r{text}\033[K", end="\n" if last else "", file=sys.stderr, flush=True)
        else:
            print(text, file=sys.stderr, flush=True)

    @property
    def seconds(self) -> float:
        return max(time.monotonic() - self.began, 1e-9)


def export(args: argparse.Namespace) -> int:
    failure = _client_package().CommitteeError
    progress = Progress(args.quiet or (args.output is None and not sys.stderr.isatty()), 1.0)
    out: IO[bytes] = sys.stdout.buffer if args.output is None else args.output.open("wb")
    written = 0
    try:
        with _client(args) as c:
            after, end = args.from_version, args.to_version
            while end is None or after < end:
                page = c.log_page(args.model, after)
                end = page.version if end is None else end
                lines = page.lines
                if page.version > end:  # the model went on meanwhile: up to end only
                    lines = [line for line in lines if json.loads(line)["seq"] <= end]
                if lines:
                    out.write(b"\n".join(lines) + b"\n")
                written += len(lines)
                progress.show(
                    f"committee export: {written:,} entries, to version {page.next_from:,}"
                )
                if page.next_from == after or len(lines) < len(page.lines):
                    break
                after = page.next_from
    except failure as e:
        print(f"committee export: {e}", file=sys.stderr)
        return 1
    finally:
        if args.output is not None:
            out.close()
        else:
            out.flush()
    progress.show(f"committee export: {written:,} entries of model {args.model!r}", last=True)
    return 0


def _lines(path: str) -> Iterator[bytes]:
    stream = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    try:
        yield from stream
    finally:
        if path != "-":
            stream.close()


def _count(path: str) -> int | None:
    """The lines of a regular file (None for standard input)."""
    if path == "-" or not Path(path).is_file():
        return None
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")


def _default_id(c: Client, model: str, path: str) -> str:
    """The import's id when none is given: the model (its name and creation) and the
    file's first block of lines, so a run again of the same import finds the first."""
    h = hashlib.blake2b(digest_size=15)
    h.update(f"{model}\0{c.model(model).created}\0".encode())
    with open(path, "rb") as f:
        for line in itertools.islice(f, BLOCK):
            h.update(line)
    return f"f{h.hexdigest()}"


def import_file(args: argparse.Namespace) -> int:
    failure = _client_package().CommitteeError
    if args.lines_per_request < BLOCK or args.lines_per_request % BLOCK:
        print(f"committee import: --lines-per-request: a multiple of {BLOCK}", file=sys.stderr)
        return 2
    if args.file == "-" and args.import_id is None:
        print("committee import: reading standard input needs --import-id", file=sys.stderr)
        return 2
    if args.file != "-" and not Path(args.file).is_file():
        print(f"committee import: no file {args.file!r}", file=sys.stderr)
        return 2
    progress = Progress(args.quiet, args.progress_every)
    total = _count(args.file)
    shown = 0
    try:
        with _client(args) as c:
            import_id = args.import_id or _default_id(c, args.model, args.file)
            if args.from_line is not None:
                start = max(1, args.from_line - (args.from_line - 1) % BLOCK)
            else:
                start = c.import_progress(args.model, import_id)
            if not args.quiet:
                where = f", resuming at line {start:,}" if start > 1 else ""
                print(f"committee import: import id {import_id}{where}", file=sys.stderr)

            def report(done: LogImport) -> None:
                nonlocal shown
                for e in done.errors[shown:ERRORS_SHOWN]:
                    field = f" ({e.field})" if e.field else ""
                    print(f"line {e.line}: {e.status}{field}: {e.message}", file=sys.stderr)
                shown = min(len(done.errors), ERRORS_SHOWN)
                progress.show(_summary(done, start, total, progress.seconds))

            lines = (line for i, line in enumerate(_lines(args.file), 1) if i >= start)
            done = c.import_log(
                args.model,
                lines,
                import_id=import_id,
                first_line=start,
                lines_per_request=args.lines_per_request,
                progress=report,
            )
    except failure as e:
        print(f"committee import: {e}", file=sys.stderr)
        print("committee import: run the same command again to resume", file=sys.stderr)
        return 1
    progress.show(_summary(done, start, total, progress.seconds), last=True)
    if done.failed > shown:
        print(f"committee import: {done.failed - shown:,} more lines refused", file=sys.stderr)
    return 1 if done.failed else 0


def _summary(done: LogImport, start: int, total: int | None, seconds: float) -> str:
    at = done.next_line - 1  # (past the end of the file when its last block was done)
    if total is not None:
        at = min(at, total)
    of = f" / {total:,} ({100 * at / max(total, 1):.1f}%)" if total is not None else ""
    rate = done.lines / seconds
    return (
        f"committee import: line {at:,}{of}, {rate:,.0f} lines/s: {done.applied:,} applied, "
        f"{done.already:,} already there, {done.failed:,} refused"
    )
