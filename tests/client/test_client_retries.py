"""Retries: idempotent calls are tried again after a 503, a failed connection or a lost
answer; ``learn`` only when the request certainly never reached the service."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from _clientkit import FUSION, Counting, LossyProxy
from _server import free_port

from committee_client import Client, ConnectionFailed, Retry, Unavailable
from storage.server import EmbeddedRedis

INST = {"experts": {"cnn": "dog"}}
QUICK = Retry(attempts=3, backoff=0.01, max_delay=0.05, jitter=0)


def retry_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "committee.client"]


def test_retry_policy() -> None:
    r = Retry(attempts=5, backoff=0.1, multiplier=3, max_delay=1, jitter=0)
    assert [round(r.delay(a), 6) for a in (1, 2, 3)] == [0.1, 0.3, 0.9]
    assert r.delay(4) == 1  # capped
    assert r.delay(1, retry_after=0.5) == 0.5  # the service's Retry-After is honoured
    assert r.delay(1, retry_after=60) == 1  # up to max_delay
    jittered = Retry(backoff=1, jitter=0.5)
    assert all(0.5 <= jittered.delay(1) <= 1 for _ in range(100))
    for bad in ({"attempts": 0}, {"backoff": -1}, {"multiplier": 0.5}, {"jitter": 2}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Retry(**bad)  # type: ignore[arg-type]


def test_503_is_retried_then_raised_and_learn_is_not(
    fragile: str, own_redis: EmbeddedRedis, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    counting = Counting()
    with Client(fragile, retry=QUICK, transport=counting) as c:
        c.create_model(name, **FUSION)
        own_redis.stop()
        counting.sent = 0
        with caplog.at_level(logging.WARNING, "committee.client"), pytest.raises(Unavailable) as e:
            c.predict(name, INST)
        assert type(e.value) is Unavailable and e.value.status == 503
        assert e.value.retry_after == 1.0 and counting.sent == 3
        retries = retry_lines(caplog)
        assert len(retries) == 2 and "retry 2 of 2 in 0.05 s" in retries[1]
        assert "/predict failed (503" in retries[0]
        for call in (lambda: c.model(name), lambda: c.label(name, "t", "cat")):
            counting.sent = 0
            with pytest.raises(Unavailable):
                call()
            assert counting.sent == 3
        counting.sent = 0
        with pytest.raises(Unavailable):  # its Idempotency-Key makes every retry safe
            c.learn(name, INST, "cat")
        assert counting.sent == 3
        counting.sent = 0
        assert not c.ready() and c.alive() and counting.sent == 2  # probes: no retries
        own_redis.start()
        p = c.predict(name, INST)
        assert c.label(name, p.trial_id or "", "cat").mistake


def test_a_retry_outlasts_a_short_outage(fragile: str, own_redis: EmbeddedRedis, name: str) -> None:
    counting = Counting()
    patient = Retry(attempts=30, backoff=0.02, max_delay=0.1)
    with Client(fragile, retry=patient, transport=counting) as c:
        c.create_model(name, **FUSION)
        own_redis.stop()
        restart = threading.Timer(0.3, own_redis.start)
        restart.start()
        try:
            p = c.predict(name, INST)
        finally:
            restart.join()
        assert counting.sent > 1 and p.label == "dog"
        assert c.model(name).counters.predictions == 1


def test_retry_after_is_honoured(
    fragile: str, own_redis: EmbeddedRedis, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    with Client(fragile, retry=Retry(attempts=2, backoff=0, jitter=0)) as c:
        c.create_model(name, **FUSION)
        own_redis.stop()
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, "committee.client"), pytest.raises(Unavailable):
            c.model(name)
        assert time.monotonic() - started >= 1.0
        assert "retry 1 of 1 in 1.00 s" in retry_lines(caplog)[0]


def test_refused_connections_are_retried_for_every_call() -> None:
    counting = Counting()
    with Client(f"http://127.0.0.1:{free_port()}", retry=QUICK, transport=counting) as c:
        for call in (lambda: c.predict("m", INST), lambda: c.learn("m", INST, "cat")):
            counting.sent = 0
            with pytest.raises(ConnectionFailed) as e:
                call()
            assert counting.sent == 3  # never sent, so even learn is safe to repeat
            assert e.value.status is None and e.value.sent is False
            assert isinstance(e.value, Unavailable) and "ConnectError" in str(e.value)
        assert not c.alive()


def test_timeouts_are_retried_with_the_same_key(silent: tuple[str, list[int]]) -> None:
    url, accepted = silent
    with Client(url, timeout=0.2, retry=QUICK) as c:
        with pytest.raises(ConnectionFailed) as e:
            c.label("m", "t-1", "cat")
        assert e.value.sent is True and "ReadTimeout" in str(e.value)
        assert accepted[0] == 3
        with pytest.raises(ConnectionFailed) as learn:
            c.learn("m", INST, "cat")
        assert learn.value.sent is True and accepted[0] == 6  # safe: the key goes along


def test_lost_answers(service_url: str, name: str) -> None:
    """The service applied the call, the answer was lost: a retried predict, label or
    learn returns the first answer and is applied once."""
    with Client(service_url, retry=QUICK) as direct:
        direct.create_model(name, **FUSION)
        with LossyProxy(service_url, drop=1) as proxy, Client(proxy.url, retry=QUICK) as c:
            p = c.predict(name, INST)
            assert proxy.forwarded == 2
            assert p == direct.predict(name, INST, trial_id=p.trial_id)
            assert direct.model(name).counters.predictions == 1
            proxy.drop = 1
            got = c.label(name, p.trial_id or "", "cat")
            assert proxy.forwarded == 4 and got.mistake and got.label == "cat"
            assert direct.label(name, p.trial_id or "", "cat") == got
            proxy.drop = 1
            learned = c.learn(name, INST, "bird")
            assert proxy.forwarded == 6 and learned.label == "bird"
        m = direct.model(name)
        assert m.version == 2 and m.counters.learned == 1
