"""The service benchmark's edge peer keeps each trial it is sent under ``/append``: every
body appended to its Redis stream once, the calls arriving together gathered into fewer
script calls, each answered as the plain edge answers it."""

from __future__ import annotations

import asyncio
import sys

import httpx
import orjson
import pytest
import redis
from _run import BENCH_DIR

CALLS = 40
JSON = {"content-type": "application/json"}


@pytest.fixture
def edge(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> object:
    monkeypatch.setenv("EDGE_REDIS_URL", redis_url)
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    sys.modules.pop("_service_edge", None)
    import _service_edge

    return _service_edge.create()


def test_single_calls_under_append_are_each_kept_once_and_gathered(
    edge: object, redis_url: str
) -> None:
    plain = redis.Redis.from_url(redis_url)
    plain.delete("edge:log")
    plain.config_resetstat()
    bodies = [
        orjson.dumps({"trial_id": f"t{i}", "instance": {"experts": {"e0": {"0": i / CALLS}}}})
        for i in range(CALLS)
    ]

    async def send_all() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=edge)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            path = "/append/v1/models/m/predict"
            return await asyncio.gather(*(http.post(path, content=b, headers=JSON) for b in bodies))

    answers = asyncio.run(send_all())
    assert [r.status_code for r in answers] == [200] * CALLS
    assert [r.json()["trial_id"] for r in answers] == [f"t{i}" for i in range(CALLS)]
    kept = [fields[b"x"] for _, fields in plain.xrange("edge:log")]
    assert sorted(kept) == sorted(bodies)
    scripts = plain.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    scripts += plain.info("commandstats").get("cmdstat_eval", {}).get("calls", 0)
    assert 1 <= scripts < CALLS  # gathered: fewer script calls than trials


def test_the_plain_edge_keeps_nothing(edge: object, redis_url: str) -> None:
    plain = redis.Redis.from_url(redis_url)
    plain.delete("edge:log")

    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=edge)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            return await http.post(
                "/v1/models/m/learn", content=b'{"instance":{},"label":1}', headers=JSON
            )

    answer = asyncio.run(send())
    assert answer.status_code == 200 and answer.json() == {
        "trial_id": None,
        "label": 1,
        "ok": True,
    }
    assert plain.xlen("edge:log") == 0
