"""Learns that each carry their own idempotency key, as a consumer's batch sends them:
one script call appends them all, one more keeps all their answers, and each key keeps
its own exactly-once effect (a retry gets the first answer, another body a conflict)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
import redis
from _brokers import Service
from hypothesis import given
from hypothesis import strategies as st

from app.service.model_service import body_digest, request_digest
from storage.errors import Conflict, ModelNotFound
from storage.repository import Idempotency

X = {"features": [1.0, 0.0, 2.0, -1.0]}
Y = {"features": [0.0, 3.0, 1.0, 1.0]}


def request(key: str, instance: dict[str, Any], label: str) -> Any:
    digest = orjson.dumps([instance, label]).hex()[:32]
    return (Idempotency(key, digest), [(instance, label)])


def test_a_batch_of_keyed_learns_is_appended_once_per_key_with_its_answers_kept(
    redis_url: str, redis_prefix: str
) -> None:
    async def go() -> None:
        s = Service(redis_url, redis_prefix)
        await s.create("m")
        trials = s.service.trials
        first = [request(f"k{i}", X if i % 2 else Y, "ab"[i % 3 % 2]) for i in range(6)]
        batch = [
            *first,
            first[2],  # the same key and body again in the same call: the first answer
            request("k3", Y, "a"),  # the same key with another body: a conflict
        ]
        got = await trials.learn_groups("m", batch)
        assert all(isinstance(out[0], dict) for out in got[:6]), got
        assert got[6] == got[2]
        assert isinstance(got[7][0], Conflict)
        assert (await s.service.store.read("m")).counters["learned"] == 6
        # each record keeps its request's answer, in one call for the batch
        r = redis.Redis.from_url(redis_url)
        keys = s.service.store.keys("m")
        for (idem, _), out in zip(first, got, strict=False):
            kept = orjson.loads(r.hget(keys.idem(idem.key), "r") or b"null")
            judged = out[0]
            assert isinstance(judged, dict)
            assert len(kept) == 1 and kept[0][1] == judged["updated"]
        r.close()
        # delivered again later, in another order, beside a new one: the first answers
        again = await trials.learn_groups("m", [first[4], request("k9", X, "a"), first[1]])
        assert (again[0], again[2]) == (got[4], got[1])
        assert (await s.service.store.read("m")).counters["learned"] == 7
        await s.close()

    asyncio.run(go())


def test_the_answers_kept_together_skip_a_record_of_another_request(
    redis_url: str, redis_prefix: str
) -> None:
    """The records of a batch keep their answers in one script call; one whose record
    holds another request's body (or none) is refused, the others kept."""

    async def go() -> None:
        s = Service(redis_url, redis_prefix)
        await s.create("m")
        store = s.service.store
        r = redis.Redis.from_url(redis_url)
        keys = store.keys("m")
        for key in ("a", "b"):
            r.hset(keys.idem(key), mapping={"op": "learn", "h": f"hash-{key}"})
        both = [(Idempotency("a", "hash-a"), b"[[0,true]]"), (Idempotency("b", "hash-b"), b"[]")]
        await store.trials.keep_answers("m", both)
        assert [r.hget(keys.idem(k), "r") for k in ("a", "b")] == [b"[[0,true]]", b"[]"]
        other = [(Idempotency("a", "hash-a"), b"[[1,false]]"), (Idempotency("b", "x"), b"no")]
        with pytest.raises(ModelNotFound):
            await store.trials.keep_answers("m", other)
        assert [r.hget(keys.idem(k), "r") for k in ("a", "b")] == [b"[[1,false]]", b"[]"]
        r.close()
        await s.close()

    asyncio.run(go())


def test_answers_not_kept_are_read_again_from_the_folded_outcomes(
    redis_url: str, redis_prefix: str
) -> None:
    """``keep=False`` (the consumer's way: each answer is published before its message is
    acknowledged) writes no kept answer; a retry, here or at another worker that never
    saw the first call, still gets the first answer, appended once."""

    async def go() -> None:
        s = Service(redis_url, redis_prefix)
        await s.create("m")
        first = [request(f"k{i}", X if i % 2 else Y, "ab"[i % 3 % 2]) for i in range(6)]
        got = await s.service.trials.learn_groups("m", first, keep=False)
        assert all(isinstance(out[0], dict) for out in got), got
        r = redis.Redis.from_url(redis_url)
        keys = s.service.store.keys("m")
        assert all(r.hget(keys.idem(idem.key), "r") is None for idem, _ in first)
        again = await s.service.trials.learn_groups("m", first[::-1], keep=False)
        assert again == got[::-1]
        other = Service(redis_url, redis_prefix)  # another worker: the outcomes folded
        for _ in range(100):
            retried = await other.service.trials.learn_groups("m", first, keep=False)
            if all(isinstance(out[0], dict) for out in retried):
                break
            await asyncio.sleep(0.05)  # (not folded yet: try again, as a redelivery)
        assert retried == got
        assert (await s.service.store.read("m")).counters["learned"] == 6
        r.close()
        await other.close()
        await s.close()

    asyncio.run(go())


@given(st.sampled_from(["learn", "learn/batch"]), st.text(max_size=20), st.binary(max_size=300))
def test_a_bodys_digest_is_the_requests_digest_with_its_head_kept(
    op: str, name: str, body: bytes
) -> None:
    """A stream's learn and an HTTP learn with the same key and body are one request:
    both are hashed by :func:`body_digest`, which is :func:`request_digest` of the op,
    the model and the body."""
    assert body_digest(op, name, body) == request_digest(op, name, body)
    assert body_digest(op, name, body + b" ") != body_digest(op, name, body)
