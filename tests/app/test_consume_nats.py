"""``committee consume`` on NATS JetStream: a durable pull consumer's messages applied as
the REST calls apply them, answers published to the reply subject, malformed ones and
ones outside the key's models dead-lettered, each message's trial in the log exactly
once however often it is delivered, a consumer killed mid-load included. Each test runs
a ``nats-server -js`` of its own (never the machine's)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import orjson
import pytest
from _brokers import (
    ConsumerProcesses,
    Service,
    create_model,
    learn_body,
    logged,
    nats_server,
    until,
)
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from app.service.consume.consumer import Settlement

SUBJECT = "committee.trials"


@pytest.fixture
def nats_url() -> Iterator[str]:
    with nats_server() as url:
        yield url


def source(url: str, **options: str) -> str:
    extra = "".join(f",{k}={v}" for k, v in options.items())
    return f"{url}#stream=TRIALS{extra}"


async def published(js: JetStreamContext, stream: str) -> list[tuple[dict[str, str], bytes]]:
    """Every message of ``stream`` (headers, payload), in order."""
    info = await js.stream_info(stream)
    out: list[tuple[dict[str, str], bytes]] = []
    if not info.state.messages:
        return out
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        m = await js.get_msg(stream, seq)
        out.append((dict(m.headers or {}), m.data or b""))
    return out


async def answers(js: JetStreamContext) -> list[dict[str, Any]]:
    try:
        got = await published(js, "TRIALS_REPLIES")
    except nats.js.errors.NotFoundError:
        return []
    return [{"seq": h["Committee-Id"], **orjson.loads(data)} for h, data in got]


async def dead(js: JetStreamContext) -> list[dict[str, str]]:
    try:
        got = await published(js, "TRIALS_DEAD")
    except nats.js.errors.NotFoundError:
        return []
    return [h for h, _ in got]


async def pending(js: JetStreamContext) -> int:
    info = await js.consumer_info("TRIALS", "committee")
    return int(info.num_ack_pending) + int(info.num_pending)


async def prepared(url: str) -> tuple[Any, JetStreamContext]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="TRIALS", subjects=[f"{SUBJECT}.>"]))
    return nc, js


def test_predict_label_and_learn_are_answered_on_the_reply_subject(
    redis_url: str, redis_prefix: str, nats_url: str
) -> None:
    async def go() -> None:
        s = Service(redis_url, redis_prefix)
        await s.create("team.m")  # a name with a dot: the subject's last token is the op
        nc, js = await prepared(nats_url)
        x = {"instance": {"features": [1.0, 0.0, 1.0, 0.0]}}
        await js.publish(f"{SUBJECT}.team.m.predict", orjson.dumps({**x, "trial_id": "t1"}))
        await js.publish(f"{SUBJECT}.team.m.label", b'{"trial_id": "t1", "label": "b"}')
        await js.publish(f"{SUBJECT}.team.m.learn", orjson.dumps({**x, "label": "a"}))
        async with s.running(source(nats_url)):
            got = await until(lambda: _count(answers(js), 3))
        assert [a["op"] for a in got] == ["predict", "label", "learn"]
        assert all("result" in a and a["model"] == "team.m" for a in got), got
        assert [a["seq"] for a in got] == ["1", "2", "3"]
        assert got[1]["result"]["predicted"] == got[0]["result"]["label"]
        assert await pending(js) == 0
        await nc.close()
        await s.close()

    asyncio.run(go())


async def _count(pending_list: Any, n: int) -> Any:
    got = await pending_list
    return got if len(got) >= n else None


def test_an_unacknowledged_message_comes_again_and_gets_the_first_answer(
    redis_url: str, redis_prefix: str, nats_url: str
) -> None:
    """A consumer applies messages and dies before acknowledging them; after the ack wait
    they go to the next consumer, which applies nothing twice and answers as the first."""

    async def go() -> None:
        s = Service(redis_url, redis_prefix, consume_claim_idle_ms=500)
        await s.create("m")
        nc, js = await prepared(nats_url)
        for i in range(20):
            await js.publish(f"{SUBJECT}.m.learn", learn_body(i))
        first = s.consumer(source(nats_url))
        await first.source.open()
        batch = await first.source.fetch(100)
        assert len(batch) == 20
        applied = await first.apply(batch)  # ... and killed before settling
        second = s.consumer(source(nats_url))
        await second.source.open()
        await asyncio.sleep(0.7)  # the ack wait
        again = await second.source.fetch(100)
        assert sorted(d.id for d in again) == sorted(d.id for d in batch)
        redone = await second.apply(again)
        await second.source.settle(redone)
        before = {d.id: orjson.loads(a) for d, a in applied.answers}
        assert {d.id: orjson.loads(a) for d, a in redone.answers} == before
        await until(lambda: _zero(pending(js)))
        assert await s.logged("m") == {i: 1 for i in range(20)}
        await first.source.close()
        await second.source.close()
        await nc.close()
        await s.close()

    asyncio.run(go())


async def _zero(n: Any) -> bool:
    return await n == 0


def test_malformed_and_out_of_scope_messages_are_dead_lettered_and_the_rest_flows(
    redis_url: str, redis_prefix: str, nats_url: str
) -> None:
    async def go() -> None:
        s = Service(redis_url, redis_prefix)
        for name in ("team-a", "other"):
            await s.create(name)
        key = await s.api_key("write", "team-*")
        nc, js = await prepared(nats_url)
        bad = [
            ("team-a.learn", b"{not json", "body: not JSON"),
            ("team-a.forget", learn_body(0), "op: 'forget'"),
            ("team-a.predict", b'{"instance": {"features": [1, 2, 3, 4]}}', "trial_id: missing"),
            ("other.learn", learn_body(0), "model: 'other' is outside the API key's models"),
        ]
        for i, (subject, body, _) in enumerate(bad):
            await js.publish(f"{SUBJECT}.team-a.learn", learn_body(i))
            await js.publish(f"{SUBJECT}.{subject}", body)
        async with s.running(source(nats_url), key):
            await until(lambda: _count(answers(js), 4))
            letters = await until(lambda: _count(dead(js), 4))
        for letter, (subject, _, reason) in zip(letters, bad, strict=True):
            assert letter["Committee-Subject"] == f"{SUBJECT}.{subject}"
            assert letter["Committee-Reason"].startswith(reason), letter
        assert await s.logged("team-a") == {i: 1 for i in range(4)}
        assert await s.logged("other") == {}
        assert await pending(js) == 0
        await nc.close()
        await s.close()

    asyncio.run(go())


def test_a_message_delivered_too_often_is_dead_lettered_not_applied(
    redis_url: str, redis_prefix: str, nats_url: str
) -> None:
    """A consumer takes the message and lets its ack wait pass, twice; delivered the
    third time, more than ``consume_max_deliveries``, it is dead-lettered with the count
    and terminated (the durable consumer offers it no more), the message beside it
    applied."""

    async def go() -> None:
        s = Service(redis_url, redis_prefix, consume_claim_idle_ms=300, consume_max_deliveries=2)
        await s.create("m")
        nc, js = await prepared(nats_url)
        await js.publish(f"{SUBJECT}.m.learn", learn_body(0))
        c = s.consumer(source(nats_url))
        await c.source.open()
        assert (await js.consumer_info("TRIALS", "committee")).config.max_deliver == 3
        for n in (1, 2):  # ... each time held past its ack wait
            got = await until(lambda: c.source.fetch(10))
            assert [(d.id, d.deliveries) for d in got] == [("1", n)]
        await c.source.close()
        await js.publish(f"{SUBJECT}.m.learn", learn_body(1))
        async with s.running(source(nats_url)):
            letters = await until(lambda: _count(dead(js), 1))
            await until(lambda: _count(answers(js), 1))
        assert letters[0]["Committee-Id"] == "1"
        assert letters[0]["Committee-Reason"] == (
            "deliveries: delivered 3 times: at most 2 (consume_max_deliveries)"
        )
        assert [a["seq"] for a in await answers(js)] == ["2"]
        assert await s.logged("m") == {1: 1}
        await until(lambda: _zero(pending(js)))
        await nc.close()
        await s.close()

    asyncio.run(go())


def test_consumers_killed_mid_load_leave_every_trial_in_the_log_exactly_once(
    redis_url: str, redis_prefix: str, nats_url: str, tmp_path: Path
) -> None:
    """Three ``committee consume`` processes share the durable consumer; one is SIGKILLed
    while the messages flow and started again: every message's trial is in the log once,
    each message answered (a redelivered one with the first answer), nothing pending."""
    n = 3_000
    create_model(redis_url, redis_prefix, "m")
    env = {
        "COMMITTEE_REDIS_URL": redis_url,
        "COMMITTEE_KEY_PREFIX": redis_prefix,
        "COMMITTEE_CONSUME_CLAIM_IDLE_MS": "1000",
        "COMMITTEE_CONSUME_BATCH": "64",
        "COMMITTEE_LOG_LEVEL": "warning",
    }

    async def publish() -> None:
        nc, js = await prepared(nats_url)
        for i in range(n):
            await nc.publish(f"{SUBJECT}.m.learn", learn_body(i))
        await nc.flush()
        await until(lambda: _stored(js, n))
        await nc.close()

    async def progress() -> tuple[int, int]:
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        try:
            replies = await js.stream_info("TRIALS_REPLIES")
            return int(replies.state.messages), await pending(js)
        except nats.js.errors.NotFoundError:
            return 0, n
        finally:
            await nc.close()

    procs = ConsumerProcesses(source(nats_url), env, tmp_path)
    try:
        asyncio.run(publish())
        for name in ("w0", "w1", "w2"):
            procs.start(name)
        deadline = time.monotonic() + 120
        while asyncio.run(progress())[0] < n // 3:
            procs.alive()
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.05)
        procs.kill("w1")
        procs.start("w1")
        while (got := asyncio.run(progress()))[0] < n or got[1]:
            procs.alive()
            assert time.monotonic() < deadline, got
            time.sleep(0.2)
    finally:
        procs.stop_all()

    async def check() -> None:
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        first: dict[str, Any] = {}
        for a in await answers(js):
            assert "result" in a, a
            assert first.setdefault(a["seq"], a["result"]) == a["result"]  # the first answer
        assert len(first) == n
        assert await dead(js) == []
        assert await pending(js) == 0
        await nc.close()

    asyncio.run(check())
    assert logged(redis_url, redis_prefix, "m") == {i: 1 for i in range(n)}


async def _stored(js: JetStreamContext, n: int) -> bool:
    return (await js.stream_info("TRIALS")).state.messages >= n


def test_pulls_take_what_is_there_then_wait_for_the_next_and_keep_the_rest(
    redis_url: str, redis_prefix: str, nats_url: str
) -> None:
    """A fetch takes at most what it asks for, the rest of a pull's messages coming with
    the next fetch (no second request meanwhile); with nothing there, a fetch waits for
    the next message and returns it as it comes; a message fetched and not acknowledged
    comes again once its ack wait passed, its deliveries counted."""

    async def go() -> None:
        s = Service(redis_url, redis_prefix, consume_claim_idle_ms=4000)
        nc, js = await prepared(nats_url)
        for i in range(5):
            await js.publish(f"{SUBJECT}.m.learn", learn_body(i))
        c = s.consumer(source(nats_url))
        src = c.source
        await src.open()
        try:
            first = await src.fetch(5)
            assert [d.id for d in first] == ["1", "2", "3", "4", "5"]
            assert all(d.deliveries == 1 and d.model == "m" and d.op == "learn" for d in first)
            start = time.monotonic()
            assert await src.fetch(5) == []  # nothing there: waited a second at most
            assert time.monotonic() - start < 3
            waiting = asyncio.ensure_future(src.fetch(2))
            await asyncio.sleep(0.2)
            for i in range(5, 8):
                await js.publish(f"{SUBJECT}.m.learn", learn_body(i))
            came = await asyncio.wait_for(waiting, 3)
            assert 1 <= len(came) <= 2 and came[0].id == "6"
            rest = await src.fetch(5)
            ids = [d.id for d in came + rest]
            while len(ids) < 3:
                ids += [d.id for d in await src.fetch(5)]
            assert ids == ["6", "7", "8"]
            answered = [(d, b"{}") for d in first[1:] + came + rest]
            await src.settle(Settlement(answers=answered))  # the first one is not
            again: list[Any] = []
            deadline = time.monotonic() + 10
            while not again and time.monotonic() < deadline:
                again = await src.fetch(5)
            assert [(d.id, d.deliveries) for d in again] == [("1", 2)]
        finally:
            await src.close()
        await nc.close()
        await s.close()

    asyncio.run(go())
