"""``committee consume`` on Redis Streams: trials from a consumer group applied as the REST
calls apply them, answered to the reply stream, malformed ones and ones outside the
key's models dead-lettered, each message's trial in the log exactly once however often
it is delivered, a consumer killed mid-load included."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from _brokers import ConsumerProcesses, Service, create_model, learn_body, logged, until

from app.core import jsontext
from app.http.bodies import read_trials
from app.service.consume.consumer import AccessRefused
from app.service.consume.sources import SourceError, parse_source


@pytest.fixture
def stream() -> str:
    return f"trials-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def answers(r: redis.Redis, stream: str) -> list[dict[str, Any]]:
    return [
        {"entry": f[b"id"].decode(), **orjson.loads(f[b"answer"])}
        for _, f in r.xrange(f"{stream}:replies")
    ]


def dead(r: redis.Redis, stream: str) -> list[dict[str, str]]:
    return [{k.decode(): v.decode() for k, v in f.items()} for _, f in r.xrange(f"{stream}:dead")]


def pending(r: redis.Redis, stream: str, group: str = "committee") -> int:
    return int(r.xpending(stream, group)["pending"])


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_predict_label_and_learn_are_answered_on_the_reply_stream(
    redis_url: str, redis_prefix: str, stream: str, r: redis.Redis
) -> None:
    async def go() -> None:
        s = Service(redis_url, redis_prefix)
        await s.create("m")
        x = {"instance": {"features": [1.0, 0.0, 1.0, 0.0]}}
        r.xadd(
            stream, {"model": "m", "op": "predict", "body": orjson.dumps({**x, "trial_id": "t1"})}
        )
        r.xadd(stream, {"model": "m", "op": "label", "body": b'{"trial_id": "t1", "label": "b"}'})
        r.xadd(stream, {"model": "m", "op": "learn", "body": orjson.dumps({**x, "label": "a"})})
        async with s.running(f"redis:#stream={stream}"):
            await until(lambda: len(answers(r, stream)) == 3)
        got = answers(r, stream)
        assert [a["op"] for a in got] == ["predict", "label", "learn"]
        assert all("result" in a and a["model"] == "m" for a in got), [a.get("error") for a in got]
        predicted = got[0]["result"]
        assert predicted["trial_id"] == "t1" and set(predicted["scores"]) == {"a", "b"}
        assert got[1]["result"]["label"] == "b"
        assert got[1]["result"]["predicted"] == predicted["label"]
        assert got[2]["result"]["label"] == "a"
        assert pending(r, stream) == 0
        counters = (await s.service.store.read("m")).counters
        assert (counters["predictions"], counters["labelled"], counters["learned"]) == (1, 1, 1)
        await s.close()

    run(go())


@pytest.mark.parametrize("sparse", [False, True], ids=["one-by-one", "read-together"])
def test_a_redelivered_message_gets_the_first_answer_and_is_applied_once(
    redis_url: str, redis_prefix: str, stream: str, r: redis.Redis, sparse: bool
) -> None:
    """A consumer reads messages and dies before acknowledging them; its successor of the
    same name reads them again, applies nothing twice and answers as the first did,
    whether the learns were read one by one or together."""
    jsontext.warm()  # as the consumer's warm-up leaves it

    async def go() -> None:
        s = Service(redis_url, redis_prefix)
        await s.create("m")
        for i in range(20):
            r.xadd(stream, {"model": "m", "op": "learn", "body": learn_body(i, sparse)})
        x = orjson.dumps({"instance": {"features": [0.5, 0.5, 0.5, 0.5]}, "trial_id": "p1"})
        r.xadd(stream, {"model": "m", "op": "predict", "body": x})
        url = f"redis:#stream={stream},consumer=c1"
        first = s.consumer(url)
        await first.source.open()
        batch = await first.source.fetch(100)
        assert len(batch) == 21
        applied = await first.apply(batch)  # ... and killed before settling
        assert len(applied.answers) == 21 and pending(r, stream) == 21
        second = s.consumer(url)
        await second.source.open()
        again = await second.source.fetch(100)
        assert [d.id for d in again] == [d.id for d in batch]
        redone = await second.apply(again)
        await second.source.settle(redone)
        before = {d.id: orjson.loads(a) for d, a in applied.answers}
        after = {d.id: orjson.loads(a) for d, a in redone.answers}
        assert after == before
        assert pending(r, stream) == 0
        assert await s.logged("m") == {i: 1 for i in range(20)}
        await s.close()

    run(go())


FUSION = {
    "labels": ["a", "b", "c"],
    "input": {"experts": {"expert_names": ["e0", "e1", "e2"]}},
    "learner": {"kind": "committee"},
    "label_ttl": 3600.0,
}


def fusion_learn(i: int) -> bytes:
    votes = {
        f"e{e}": {y: round(((i * 7 + e * 3 + k) % 11) / 10, 1) for k, y in enumerate("abc")}
        for e in range(3)
    }
    return orjson.dumps({"instance": {"experts": votes}, "label": "abc"[i % 3]})


def test_learns_read_together_are_applied_as_each_read_alone(
    redis_url: str, redis_prefix: str, stream: str, r: redis.Redis
) -> None:
    """The learns of a batch are read in one compiled pass (as an HTTP batch's items
    are): each answer and the model's counts are those of a consumer that reads every
    message by itself, a predict between the learns keeping its place."""

    jsontext.warm()  # as the consumer's warm-up leaves it

    async def go() -> None:
        s = Service(redis_url, redis_prefix)
        together = 0

        def counted(raws: Any, fields: Any, required: Any) -> Any:
            nonlocal together
            got = read_trials(raws, fields, required)
            together += got is not None
            return got

        results = {}
        for name, reader in (("together", counted), ("alone", None)):
            await s.create(name, FUSION)
            for i in range(60):
                if i == 30:
                    x = {"instance": orjson.loads(fusion_learn(i))["instance"], "trial_id": "p"}
                    r.xadd(
                        f"{stream}-{name}",
                        {"model": name, "op": "predict", "body": orjson.dumps(x)},
                    )
                r.xadd(f"{stream}-{name}", {"model": name, "op": "learn", "body": fusion_learn(i)})
            async with s.running(f"redis:#stream={stream}-{name}", reader=reader):
                await until(lambda name=name: len(answers(r, f"{stream}-{name}")) == 61)
            got = answers(r, f"{stream}-{name}")
            assert all("result" in a for a in got), got
            results[name] = [(a["op"], a["result"]) for a in got]
            counters = (await s.service.store.read(name)).counters
            results[name].append(("counters", {k: counters[k] for k in ("learned", "mistakes")}))
        assert together > 0  # the learns were read together
        assert results["together"] == results["alone"]
        await s.close()

    run(go())


def test_malformed_messages_are_dead_lettered_with_their_reason_and_the_rest_flows(
    redis_url: str, redis_prefix: str, stream: str, r: redis.Redis
) -> None:
    async def go() -> None:
        s = Service(redis_url, redis_prefix, consume_max_message_bytes=2048)
        await s.create("m")
        good = {"model": "m", "op": "learn"}
        bad: list[tuple[dict[str, Any], str]] = [
            ({"op": "learn", "body": learn_body(0)}, "model: missing"),
            ({"model": "m", "op": "forget", "body": learn_body(0)}, "op: 'forget'"),
            ({**good}, "body: missing"),
            ({**good, "body": b"{not json"}, "body: not JSON"),
            ({**good, "body": b"[1]"}, "body: expected a JSON object"),
            ({**good, "body": b'{"label": "a"}'}, "instance: missing"),
            ({**good, "body": b'{"instance": {}, "label": "a", "x": 1}'}, "x: unknown field"),
            ({**good, "body": b" " * 3000}, "body: 3000 bytes: expected at most 2048"),
            (
                {**good, "body": b'{"instance": {"features": [1, 2, 3, 4]}, "label": "c"}'},
                "label: ",
            ),
            (
                {
                    "model": "m",
                    "op": "predict",
                    "body": b'{"instance": {"features": [1, 2, 3, 4]}}',
                },
                "trial_id: missing",
            ),
            ({**good, "body": b'{"instance": {"features": "x"}, "label": "a"}'}, "instance"),
            (
                {
                    **good,
                    "key": "k" * 300,
                    "body": b'{"instance": {"features": {"0": 1}}, "label": "a"}',
                },
                "key: ",
            ),
        ]
        ids = []
        for i, (fields, _) in enumerate(bad):
            if i < 10:
                r.xadd(stream, {**good, "body": learn_body(i)})
            ids.append(r.xadd(stream, fields).decode())
        async with s.running(f"redis:#stream={stream}"):
            await until(lambda: len(answers(r, stream)) == 10 and len(dead(r, stream)) == 12)
        got = sorted(dead(r, stream), key=lambda d: ids.index(d["id"]))
        for letter, (fields, reason) in zip(got, bad, strict=True):
            assert letter["reason"].startswith(reason), (letter, reason)
            assert letter.get("model") == fields.get("model")
        assert all("result" in a for a in answers(r, stream))
        assert pending(r, stream) == 0
        assert await s.logged("m") == {i: 1 for i in range(10)}
        await s.close()

    run(go())


def test_a_message_delivered_too_often_is_dead_lettered_not_applied(
    redis_url: str, redis_prefix: str, stream: str, r: redis.Redis
) -> None:
    """Each consumer that takes the message dies holding it (read again by its
    successor of the same name, claimed by another); delivered more than
    ``consume_max_deliveries`` times, it goes to the dead letters with the count, and the
    message beside it is applied."""

    async def go() -> None:
        s = Service(redis_url, redis_prefix, consume_max_deliveries=3, consume_claim_idle_ms=100)
        await s.create("m")
        poison = r.xadd(stream, {"model": "m", "op": "learn", "body": learn_body(0)}).decode()
        for n, name in ((1, "c1"), (2, "c1"), (3, "c2")):  # c1 new, c1 again, claimed by c2
            c = s.consumer(f"redis:#stream={stream},consumer={name}")
            await c.source.open()
            await asyncio.sleep(0.15)  # (idle long enough to be claimed)
            got = await c.source.fetch(10)
            assert [(d.id, d.deliveries) for d in got] == [(poison, n)]
        r.xadd(stream, {"model": "m", "op": "learn", "body": learn_body(1)})
        async with s.running(f"redis:#stream={stream},consumer=c2"):
            await until(lambda: len(dead(r, stream)) == 1 and len(answers(r, stream)) == 1)
        letter = dead(r, stream)[0]
        assert letter["id"] == poison and letter["model"] == "m"
        assert letter["reason"] == (
            "deliveries: delivered 4 times: at most 3 (consume_max_deliveries)"
        )
        assert pending(r, stream) == 0
        assert await s.logged("m") == {1: 1}
        await s.close()

    run(go())


def test_the_consumer_acts_with_its_keys_scope_and_tenancy(
    redis_url: str, redis_prefix: str, stream: str, r: redis.Redis
) -> None:
    async def go() -> None:
        s = Service(redis_url, redis_prefix)
        for name in ("team-a", "other"):
            await s.create(name)
        writer = await s.api_key("write", "team-*")
        reader = await s.api_key("read")
        with pytest.raises(AccessRefused, match="needs write"):
            await s.consumer(f"redis:#stream={stream}", reader).access.start()
        with pytest.raises(AccessRefused, match="auth is on"):
            await s.consumer(f"redis:#stream={stream}").access.start()
        # a refused start leaves no watch of the key table running (cancelled at the
        # loop's end, one in the middle of a Redis call could wait there for good)
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
        for i, name in enumerate(["team-a", "other", "team-a", "other"]):
            r.xadd(stream, {"model": name, "op": "learn", "body": learn_body(i)})
        async with s.running(f"redis:#stream={stream}", writer):
            await until(lambda: len(answers(r, stream)) + len(dead(r, stream)) == 4)
        assert [a["model"] for a in answers(r, stream)] == ["team-a", "team-a"]
        letters = dead(r, stream)
        assert [d["model"] for d in letters] == ["other", "other"]
        assert "outside the API key's models ('team-*')" in letters[0]["reason"]
        assert await s.logged("other") == {}
        assert pending(r, stream) == 0
        await s.close()

    run(go())


def test_source_urls_are_checked() -> None:
    spec = parse_source("redis://h:6380/2#stream=s,group=g,consumer=c")
    assert (spec.kind, spec.url) == ("redis", "redis://h:6380/2")
    o = spec.redis()
    assert (o.stream, o.group, o.consumer, o.reply, o.dead) == (
        "s",
        "g",
        "c",
        "s:replies",
        "s:dead",
    )
    assert parse_source("redis:#stream=s").url is None  # the service's own Redis
    for bad, why in (
        ("redis://h#group=g", "needs #stream"),
        ("redis://h#stream=s,colour=red", "takes consumer, dead"),
        ("redis://h#stream", "expected name=value"),
        ("kafka://h#stream=s", "expected redis://"),
    ):
        with pytest.raises(SourceError, match=why):
            parse_source(bad)


def test_consumers_killed_mid_load_leave_every_trial_in_the_log_exactly_once(
    redis_url: str, redis_prefix: str, stream: str, r: redis.Redis, tmp_path: Path
) -> None:
    """Three ``committee consume`` processes share the group; one is SIGKILLed while the
    messages flow and started again: every message's trial is in the log once, each
    message answered (a redelivered one with the first answer), nothing left pending."""
    n = 3_000
    create_model(redis_url, redis_prefix, "m")
    env = {
        "COMMITTEE_REDIS_URL": redis_url,
        "COMMITTEE_KEY_PREFIX": redis_prefix,
        "COMMITTEE_CONSUME_CLAIM_IDLE_MS": "1000",
        "COMMITTEE_CONSUME_BATCH": "64",
        "COMMITTEE_LOG_LEVEL": "warning",
    }
    procs = ConsumerProcesses(f"redis:#stream={stream}", env, tmp_path)
    names = [f"w{i}" for i in range(3)]
    try:
        for name in names:
            procs.start(name, f"redis:#stream={stream},consumer={name}")
        pipe = r.pipeline(transaction=False)
        for i in range(n):
            pipe.xadd(stream, {"model": "m", "op": "learn", "body": learn_body(i)})
        pipe.execute()
        deadline = time.monotonic() + 120
        while r.xlen(f"{stream}:replies") < n // 3:
            procs.alive()
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.02)
        procs.kill("w1")
        procs.start("w1", f"redis:#stream={stream},consumer=w1")
        while len({a["id"] for a in answers(r, stream)}) < n or pending(r, stream):
            procs.alive()
            assert time.monotonic() < deadline, (r.xlen(f"{stream}:replies"), pending(r, stream))
            time.sleep(0.1)
    finally:
        procs.stop_all()
    got = answers(r, stream)
    first: dict[str, Any] = {}
    for a in got:
        assert "result" in a, a
        assert first.setdefault(a["id"], a["result"]) == a["result"]  # the first answer
    assert len(first) == n
    assert dead(r, stream) == []
    assert pending(r, stream) == 0
    assert logged(redis_url, redis_prefix, "m") == {i: 1 for i in range(n)}
