"""Single-trial calls of a busy model gathered into batch calls (app.service.gather), alone and
through the service over HTTP: fewer script calls than requests, the same answers."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
import redis
from _server import ServerThread
from harness.redis_cluster import sync_client

from app.core.settings import Settings
from app.service.gather import Gather, Gathers

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Recorder:
    """A batch call that doubles its items and records each batch; while ``hold`` is set,
    each batch waits until its gate opens (:meth:`release`)."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gates: list[asyncio.Event] = []
        self.hold = False

    async def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        gate = asyncio.Event()
        self.gates.append(gate)
        if self.hold:
            await gate.wait()
        if any(i < 0 for i in items):
            raise ValueError(f"negative item in {items}")
        return [2 * i for i in items]

    def release(self) -> None:
        """Let every batch go, from now on."""
        self.hold = False
        for gate in self.gates:
            gate.set()


async def started(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_an_idle_call_goes_alone_and_those_arriving_meanwhile_go_together() -> None:
    run = Recorder()
    g: Gather[int, int] = Gather(run, most=3)
    assert await g(1) == 2
    assert run.batches == [[1]] and g.idle
    run.hold = True
    first = asyncio.ensure_future(g(10))
    await started()
    rest = [asyncio.ensure_future(g(i)) for i in range(20, 25)]
    await started()
    assert run.batches == [[1], [10]] and not g.idle  # the others wait for the first
    run.release()
    assert await first == 20
    assert await asyncio.gather(*rest) == [40, 42, 44, 46, 48]
    assert run.batches == [[1], [10], [20, 21, 22], [23, 24]]  # at most 3 at once, in order
    assert g.idle


async def test_calls_within_the_lanes_go_at_once_and_the_rest_wait_and_go_together() -> None:
    run = Recorder()
    g: Gather[int, int] = Gather(run, most=10, lanes=2)
    run.hold = True
    a, b = asyncio.ensure_future(g(1)), asyncio.ensure_future(g(2))
    await started()
    assert run.batches == [[1], [2]]  # both lanes taken, neither waited
    rest = [asyncio.ensure_future(g(i)) for i in (3, 4, 5)]
    await started()
    assert run.batches == [[1], [2]] and not g.idle  # beyond the lanes: they wait
    run.gates[0].set()  # one lane frees: those waiting go, together
    assert await a == 2
    await started()
    assert run.batches == [[1], [2], [3, 4, 5]]
    run.gates[2].set()  # their batch returns while the second call is still in flight
    assert await asyncio.gather(*rest) == [6, 8, 10]
    late = asyncio.ensure_future(g(6))  # a lane is free and nobody waits: at once
    await started()
    assert run.batches[-1] == [6] and not b.done()
    run.release()
    assert await asyncio.gather(b, late) == [4, 12]
    await started()
    assert g.idle
    assert await g(7) == 14 and run.batches[-1] == [7]


async def test_by_turn_the_calls_of_one_turn_of_the_loop_go_together() -> None:
    # a run that waits on nothing: each call is done before the next one starts, so
    # gathered by calls in flight each goes alone
    run = Recorder()
    g: Gather[int, int] = Gather(run, most=3)
    assert await asyncio.gather(*[g(i) for i in range(10, 15)]) == [20, 22, 24, 26, 28]
    assert run.batches == [[10], [11], [12], [13], [14]]
    # by turns: those started in one turn go together, at most 3 at once, in order
    run = Recorder()
    g = Gather(run, most=3, by_turn=True)
    assert await g(1) == 2 and run.batches == [[1]] and g.idle  # alone, after its turn
    assert await asyncio.gather(*[g(i) for i in range(10, 15)]) == [20, 22, 24, 26, 28]
    assert run.batches == [[1], [10, 11, 12], [13, 14]] and g.idle
    # calls of later turns, while a batch is at its run, wait and go together after it
    run.hold = True
    first = [asyncio.ensure_future(g(i)) for i in (20, 21)]
    await started()
    assert run.batches[-1] == [20, 21]
    later = [asyncio.ensure_future(g(30))]
    await started()
    later.append(asyncio.ensure_future(g(31)))
    await started()
    assert run.batches[-1] == [20, 21] and not g.idle
    run.release()
    assert await asyncio.gather(*first, *later) == [40, 42, 60, 62]
    assert run.batches[-1] == [30, 31] and g.idle


async def test_a_failed_batch_fails_its_callers_only() -> None:
    run = Recorder()
    g: Gather[int, int] = Gather(run, most=2)
    run.hold = True
    first = asyncio.ensure_future(g(1))
    await started()
    bad = [asyncio.ensure_future(g(i)) for i in (2, -3)]
    good = asyncio.ensure_future(g(4))
    await started()
    run.release()
    assert await first == 2
    for f in bad:
        with pytest.raises(ValueError, match="negative"):
            await f
    assert await good == 8
    assert run.batches == [[1], [2, -3], [4]]


async def test_a_caller_that_gave_up_is_not_sent_and_a_stopped_drain_leaves_nobody_waiting() -> (
    None
):
    run = Recorder()
    g: Gather[int, int] = Gather(run, most=10)
    run.hold = True
    first = asyncio.ensure_future(g(1))
    await started()
    gone, kept = asyncio.ensure_future(g(2)), asyncio.ensure_future(g(3))
    await started()
    gone.cancel()
    run.release()
    assert (await first, await kept) == (2, 6)
    assert run.batches == [[1], [3]]

    run.hold = True
    first = asyncio.ensure_future(g(5))
    await started()
    waiting = asyncio.ensure_future(g(6))
    await started()
    run.gates[-1].set()  # the first call returns; the waiting one's batch is held
    assert await first == 10
    await started()
    assert run.batches[-1] == [6] and g._drain is not None
    g._drain.cancel()  # as when the worker stops
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await started()
    assert g.idle


async def test_gathers_keep_one_gather_per_key_and_run_the_batch_method_with_its_key() -> None:
    runs: list[tuple[str, list[int]]] = []
    gate = asyncio.Event()

    async def run(key: str, items: list[int]) -> list[str]:
        runs.append((key, list(items)))
        await gate.wait()
        return [f"{key}{i}" for i in items]

    gathers: Gathers[str, int, str] = Gathers(run, most=5)
    calls = [asyncio.ensure_future(gathers(k, i)) for k, i in (("a", 1), ("b", 2))]
    await started()
    # each key's first call goes alone; the calls arriving meanwhile wait by key
    calls += [asyncio.ensure_future(gathers(k, i)) for k, i in (("a", 3), ("b", 4), ("a", 5))]
    await started()
    assert runs == [("a", [1]), ("b", [2])] and set(gathers._by) == {"a", "b"}
    gate.set()
    assert await asyncio.gather(*calls) == ["a1", "b2", "a3", "b4", "a5"]
    assert runs[2:] == [("a", [3, 5]), ("b", [4])]
    assert gathers._by == {}  # dropped once idle


def pause(redis_url: str, ms: int) -> None:
    """Have Redis hold every client's commands for ``ms`` milliseconds (each primary of
    a cluster)."""
    with sync_client(redis_url) as r:
        if isinstance(r, redis.RedisCluster):
            for node in r.get_primaries():
                r.execute_command("CLIENT", "PAUSE", ms, "ALL", target_nodes=node)
        else:
            r.execute_command("CLIENT", "PAUSE", ms, "ALL")


def evalsha_calls(redis_url: str) -> int:
    with sync_client(redis_url) as r:
        stats: Any = r.info("commandstats")
    if isinstance(stats, dict) and "cmdstat_evalsha" not in stats and stats:
        # a cluster client answers per node
        return sum(
            int(v.get("cmdstat_evalsha", {}).get("calls", 0))
            for v in stats.values()
            if isinstance(v, dict)
        )
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def served(redis_url: str, name: str) -> tuple[Settings, dict[str, Any]]:
    """Settings of a service of its own, and a small Winnow model ``name`` to create."""
    settings = Settings(redis_url=redis_url, key_prefix=f"g-{uuid.uuid4().hex[:12]}")
    model = {
        "name": name,
        "labels": ["a", "b"],
        "input": {"attributes": {"n_features": 8}},
        "learner": {"kind": "winnow"},
    }
    return settings, model


def test_concurrent_single_trials_over_http_share_script_calls(redis_url: str) -> None:
    settings, model = served(redis_url, "m")
    n = 60
    with ServerThread(settings) as server:
        with httpx.Client(base_url=server.url) as c:
            assert c.post("/v1/models", json=model).status_code == 201
            c.post("/v1/models/m/learn", json={"instance": {"features": [1] * 8}, "label": "a"})

        async def run() -> tuple[list[Any], list[Any], list[Any]]:
            async with httpx.AsyncClient(
                base_url=server.url, limits=httpx.Limits(max_connections=n)
            ) as c:

                async def post(path: str, body: dict[str, Any]) -> Any:
                    r = await c.post(f"/v1/models/m/{path}", json=body)
                    assert r.status_code == 200, r.text
                    return r.json()

                def x(i: int) -> dict[str, Any]:
                    return {"features": {str(i % 8): 1.0, str((i + 3) % 8): 1.0}}

                predicted = await asyncio.gather(
                    *(post("predict", {"instance": x(i), "trial_id": f"t{i}"}) for i in range(n))
                )
                labelled = await asyncio.gather(
                    *(post("label", {"trial_id": f"t{i}", "label": "ab"[i % 2]}) for i in range(n))
                )
                learned = await asyncio.gather(
                    *(post("learn", {"instance": x(i), "label": "ab"[i % 3 % 2]}) for i in range(n))
                )
                return predicted, labelled, learned

        before = evalsha_calls(redis_url)
        predicted, labelled, learned = asyncio.run(run())
        calls = evalsha_calls(redis_url) - before
        with httpx.Client(base_url=server.url) as c:
            state = c.get("/v1/models/m").json()
    # every answer is its own request's
    assert [p["trial_id"] for p in predicted] == [f"t{i}" for i in range(n)]
    assert [lab["label"] for lab in labelled] == ["ab"[i % 2] for i in range(n)]
    assert all(lab["predicted"] == p["label"] for lab, p in zip(labelled, predicted, strict=True))
    assert [lrn["label"] for lrn in learned] == ["ab"[i % 3 % 2] for i in range(n)]
    assert state["version"] == 1 + 2 * n  # every label and learn applied once
    # ... in fewer script calls than requests, background folds included: one call each
    # would be 3n and more (how many share a call depends on how the requests interleave)
    assert calls < 3 * n, calls


def test_concurrent_statistics_reads_share_redis_reads_and_each_sees_what_came_before(
    redis_url: str,
) -> None:
    settings, model = served(redis_url, "s")
    n, rounds = 40, 5
    with ServerThread(settings) as server:
        with httpx.Client(base_url=server.url) as c:
            assert c.post("/v1/models", json=model).status_code == 201

        async def reads() -> list[int]:
            """Script calls of each of 5 bursts of n concurrent reads, each burst sent
            while Redis holds every command for a second: the first reads wait at Redis
            and the others arrive meanwhile, however the client and the server (threads
            of one process) take turns on a busy machine."""
            calls = []
            for _ in range(5):
                async with httpx.AsyncClient(
                    base_url=server.url, limits=httpx.Limits(max_connections=n)
                ) as c:
                    before = evalsha_calls(redis_url)
                    pause(redis_url, 1_000)
                    got = await asyncio.gather(*(c.get("/v1/models/s/stats") for _ in range(n)))
                    calls.append(evalsha_calls(redis_url) - before)
                    answers = [r.json() for r in got]
                    assert all(a["name"] == "s" and a["learned"] == 0 for a in answers)
            return calls

        calls = asyncio.run(reads())
        assert max(calls) <= n // 2, calls  # one read each would be n in every burst

        acked = 0  # learns answered so far

        async def learn_then_read(c: httpx.AsyncClient, i: int) -> list[tuple[int, int]]:
            nonlocal acked
            seen = []
            for k in range(rounds):
                body = {"instance": {"features": {str((i + k) % 8): 1.0}}, "label": "ab"[i % 2]}
                r = await c.post("/v1/models/s/learn", json=body)
                assert r.status_code == 200, r.text
                acked += 1
                known = acked  # every learn answered before this read began
                s = await c.get("/v1/models/s/stats")
                assert s.status_code == 200, s.text
                seen.append((known, s.json()["learned"]))
            return seen

        async def mixed() -> list[list[tuple[int, int]]]:
            async with httpx.AsyncClient(
                base_url=server.url, limits=httpx.Limits(max_connections=n)
            ) as c:
                return await asyncio.gather(*(learn_then_read(c, i) for i in range(n)))

        seen = [pair for task in asyncio.run(mixed()) for pair in task]
    assert len(seen) == n * rounds
    late = [(known, learned) for known, learned in seen if learned < known]
    assert not late, f"reads that missed learns answered before they began: {late[:5]}"
