"""The client's export and import of a model's log: pages followed to the end, imports cut
into whole blocks, a retried request appending nothing twice, blocking and asyncio alike."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from _clientkit import FAST, MAX_BODY, SPARSE, LossyProxy

from app.service.log_import import BLOCK
from committee_client import (
    AsyncClient,
    Client,
    InvalidInput,
    LineError,
    LogImport,
    LogPage,
    NotFound,
)
from committee_client import _calls as calls

SMALL = MAX_BODY // 4  # bytes a request of these tests sends at most


def lines(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "instance": {"features": {str(i % 1000): 1.0, str((i * 7) % 1000): 0.5}},
            "label": [1, -1][i % 2],
        }
        for i in range(start, start + n)
    ]


def test_the_client_cuts_an_import_into_whole_blocks() -> None:
    assert calls.IMPORT_BLOCK == BLOCK  # the service's
    docs = lines(250)
    cut = list(calls.import_requests(docs, 1, 100, 1 << 20))
    assert [(at, body.count(b"\n")) for at, body in cut] == [(1, 100), (101, 100), (201, 50)]
    assert b"".join(body for _, body in cut).splitlines() == [calls.encode(d) for d in docs]
    assert [at for at, _ in calls.import_requests(docs, 301, 1000, 1 << 20)] == [301]
    by_bytes = list(calls.import_requests(docs, 1, 1000, 100))  # a block alone is larger
    assert [(at, body.count(b"\n")) for at, body in by_bytes] == [(1, 100), (101, 100), (201, 50)]
    text = ['{"a": 1}\n', b'{"b": 2}\r\n', {"c": 3}]
    ((_, body),) = calls.import_requests(text, 1, 100, 1 << 20)
    assert body == b'{"a": 1}\n{"b": 2}\n{"c":3}\n'
    with pytest.raises(ValueError, match="first_line 50"):
        list(calls.import_requests(docs, 50, 100, 1 << 20))
    with pytest.raises(ValueError, match="lines_per_request 150"):
        list(calls.import_requests(docs, 1, 150, 1 << 20))


def test_an_import_sums_its_requests_and_keeps_the_first_errors() -> None:
    def part(first: int, n: int, failed: int) -> LogImport:
        errors = [LineError(line=first + i, status=422, message="no") for i in range(failed)]
        return LogImport(
            import_id="x",
            first_line=first,
            lines=n,
            applied=n - failed,
            already=0,
            failed=failed,
            errors=errors,
            next_line=first + n,
            model_version=first + n,
        )

    done = part(1, 1000, 700).then(part(1001, 1000, 700))
    assert (done.first_line, done.lines, done.applied, done.failed) == (1, 2000, 600, 1400)
    assert done.next_line == 2001 and len(done.errors) == 1000
    assert done.errors[-1].line == 1000 + 300  # the first 1,000 kept


def test_export_then_import_gives_the_same_state(client: Client, name: str) -> None:
    client.create_model(name, **SPARSE)
    client.create_model(f"{name}-copy", **SPARSE)
    client.learn_batch(name, [(d["instance"], d["label"]) for d in lines(230)])
    page = client.log_page(name, 200, limit=10)
    assert isinstance(page, LogPage) and (page.next_from, page.version) == (210, 230)
    assert [e["seq"] for e in page.entries()] == list(range(201, 211))
    entries = list(client.export_log(name))
    assert [e["seq"] for e in entries] == list(range(1, 231))
    assert entries[0] == {"seq": 1, "kind": "learn", **lines(1)[0]}
    assert [e["seq"] for e in client.export_log(name, 100, to_version=105)] == [
        101,
        102,
        103,
        104,
        105,
    ]
    seen: list[int] = []
    done = client.import_log(
        f"{name}-copy",
        entries,
        import_id="copy",
        lines_per_request=100,
        bytes_per_request=SMALL,
        progress=lambda d: seen.append(d.next_line),
    )
    assert (done.lines, done.applied, done.already, done.failed) == (230, 230, 0, 0)
    assert seen == [101, 201, 231]
    assert client.state(f"{name}-copy") == client.state(name)
    assert client.import_progress(f"{name}-copy", "copy") == 301
    again = client.import_log(f"{name}-copy", entries, import_id="copy", bytes_per_request=SMALL)
    assert (again.applied, again.already) == (0, 230)
    rest = client.import_log(
        f"{name}-copy", entries[200:], import_id="copy", first_line=201, bytes_per_request=SMALL
    )
    assert (rest.applied, rest.already, rest.next_line) == (0, 30, 231)
    assert client.model(f"{name}-copy").version == 230
    nothing = client.import_log(f"{name}-copy", [], import_id="none")
    assert (nothing.lines, nothing.model_version) == (0, 230)


def test_refused_lines_and_requests(client: Client, name: str) -> None:
    client.create_model(name, **SPARSE)
    docs: list[Any] = lines(5)
    docs[3]["label"] = "maybe"
    done = client.import_log(name, docs, import_id="bad")
    assert (done.applied, done.failed) == (4, 1)
    (err,) = done.errors
    assert (err.line, err.status, err.field) == (4, 422, "lines.4.label")
    with pytest.raises(InvalidInput) as e:
        client.import_log(name, [*lines(2), "{not json"], import_id="worse")
    assert "line 3 is not JSON" in str(e.value)
    with pytest.raises(InvalidInput, match="beyond the model's version"):
        client.log_page(name, 99)
    with pytest.raises(NotFound):
        client.log_page(f"{name}-none")
    with pytest.raises(NotFound):
        client.import_log(f"{name}-none", lines(1), import_id="x")
    assert client.model(name).version == 4


def test_a_retried_import_appends_nothing_twice(service_url: str, name: str) -> None:
    with Client(service_url, retry=FAST) as c:
        c.create_model(name, **SPARSE)
    # the first answer is lost: the client sends the request again
    with LossyProxy(service_url, drop=1) as proxy, Client(proxy.url, retry=FAST) as c:
        done = c.import_log(name, lines(150), import_id="lossy", bytes_per_request=SMALL)
        assert proxy.forwarded == 2
        # the retry found the blocks the lost request appended
        assert (done.applied, done.already) == (0, 150)
        assert c.model(name).version == 150


def test_the_async_client_exports_and_imports(service_url: str, name: str) -> None:
    async def main() -> None:
        async with AsyncClient(service_url, retry=FAST) as c:
            await c.create_model(name, **SPARSE)
            await c.create_model(f"{name}-copy", **SPARSE)
            await c.learn_batch(name, [(d["instance"], d["label"]) for d in lines(120)])
            page = await c.log_page(name, limit=50)
            assert (page.next_from, page.version, len(page.lines)) == (50, 120, 50)
            entries = [e async for e in c.export_log(name)]
            assert [e["seq"] for e in entries] == list(range(1, 121))
            text = [json.dumps(e) for e in entries]
            done = await c.import_log(f"{name}-copy", text, import_id="a", bytes_per_request=SMALL)
            assert (done.applied, done.next_line) == (120, 121)
            assert await c.import_progress(f"{name}-copy", "a") == 201
            assert await c.state(f"{name}-copy") == await c.state(name)

    asyncio.run(main())
