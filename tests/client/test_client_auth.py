"""The client against a service with API keys: the key on every request and stream, the
error of each refusal, the key calls, and 429s retried like 503s."""

from __future__ import annotations

import asyncio
import logging
import re
import time

import pytest
from _clientkit import FAST, SPARSE

from committee_client import (
    ApiKey,
    AsyncClient,
    Client,
    Forbidden,
    NotFound,
    RateLimited,
    Retry,
    Unauthorized,
    Unavailable,
)
from committee_client.errors import from_response

X = {"features": {"3": 1.0, "17": 1.0}}
NO_KEY = ""  # not even one from COMMITTEE_API_KEY


def test_each_refusal_is_its_own_error(secured: tuple[str, str], name: str) -> None:
    url, admin = secured
    with Client(url, api_key=admin, retry=FAST) as c:
        c.create_model(name, **SPARSE)
        read = c.create_key("read", models=name).key
        other = c.create_key("write", models="nothing-*").key
    with Client(url, api_key=NO_KEY, retry=FAST) as nobody:
        with pytest.raises(Unauthorized) as e:
            nobody.models()
        assert e.value.status == 401
        with pytest.raises(Unauthorized), nobody.stream(name) as s:
            s.learn(X, 1)
    with Client(url, api_key=read, retry=FAST) as c:
        assert [m.name for m in c.models()] == [name]
        with pytest.raises(Forbidden) as forbidden:
            c.learn(name, X, 1)
        assert forbidden.value.status == 403
        with pytest.raises(Forbidden), c.stream(name) as s:
            s.learn(X, 1)
    with Client(url, api_key=other, retry=FAST) as c:
        with pytest.raises(NotFound):
            c.model(name)  # another tenant's model is as good as missing
        with pytest.raises(NotFound), c.stream(name) as s:
            s.predict(X)
    with Client(url, api_key=admin, retry=FAST) as c:
        assert c.model(name).version == 0  # nothing refused was applied


def test_a_write_key_learns_predicts_and_streams(
    secured: tuple[str, str], name: str, caplog: pytest.LogCaptureFixture
) -> None:
    url, admin = secured
    with Client(url, api_key=admin, retry=FAST) as c:
        c.create_model(name, **SPARSE)
        write = c.create_key("write", models=name, name="app").key
    with Client(url, api_key=write, retry=FAST) as c:
        assert c.learn(name, X, 1).label == 1
        p = c.predict(name, X)
        assert c.label(name, p.trial_id or "", -1).label == -1
        with caplog.at_level(logging.DEBUG), c.stream(name) as s:
            assert s.learn(X, 1).label == 1
        m = c.model(name)
    assert (m.version, m.counters.learned, m.counters.labelled) == (3, 2, 1)
    # websockets' debug lines of the handshake were logged, the key's value hidden
    assert "Authorization: [hidden]" in caplog.text and write not in caplog.text

    async def main() -> None:
        async with AsyncClient(url, api_key=write, retry=FAST) as ac:
            assert (await ac.learn(name, X, -1)).label == -1
            async with ac.stream(name) as s:
                assert (await s.learn(X, 1)).label == 1
            assert (await ac.model(name)).version == 5
        async with AsyncClient(url, api_key=NO_KEY, retry=FAST) as nobody:
            with pytest.raises(Unauthorized):
                await nobody.models()
            with pytest.raises(Unauthorized):
                async with nobody.stream(name) as s:
                    await s.learn(X, 1)

    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        asyncio.run(main())
    assert "Authorization: [hidden]" in caplog.text and write not in caplog.text


def test_the_key_comes_from_the_environment(
    secured: tuple[str, str], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, admin = secured
    monkeypatch.setenv("COMMITTEE_API_KEY", admin)
    with Client(url, retry=FAST) as c:
        c.create_model(name, **SPARSE)
        with c.stream(name) as s:
            s.learn(X, 1)

    async def versions() -> list[int]:
        async with AsyncClient(url, retry=FAST) as ac:
            return [m.version for m in await ac.models()]

    assert asyncio.run(versions()) == [1]
    monkeypatch.setenv("COMMITTEE_API_KEY", "")
    with Client(url, retry=FAST) as c, pytest.raises(Unauthorized):
        c.models()  # an empty variable is no key
    monkeypatch.setenv("COMMITTEE_API_KEY", "cmk_not-a-key")
    with Client(url, api_key=admin, retry=FAST) as c:
        assert c.model(name).version == 1  # api_key= comes before the variable
    with Client(url, retry=FAST) as c, pytest.raises(Unauthorized):
        c.models()


def test_keys_are_made_listed_revoked_and_audited(secured: tuple[str, str]) -> None:
    url, admin = secured
    with Client(url, api_key=admin, retry=FAST) as c:
        made = c.create_key("read", models="acme-*", name="dashboards", limits={"max_models": 3})
        assert made.key.startswith("cmk_") and abs(made.created - time.time()) < 60
        assert (made.scope, made.models, made.limits) == ("read", "acme-*", {"max_models": 3})
        assert made.key not in repr(made) and made.key not in str(made)
        listed = {k.id: k for k in c.api_keys()}
        assert listed[made.id] == ApiKey.model_validate(made.model_dump(exclude={"key"}))
        with Client(url, api_key=made.key, retry=FAST) as reader:
            assert reader.models() == []  # no model matches acme-*
            c.revoke_key(made.id)
            deadline = time.monotonic() + 2.0
            while True:
                try:
                    reader.models()
                except Unauthorized:
                    break
                assert time.monotonic() < deadline, "a revoked key still works after 2 s"
                time.sleep(0.05)
        assert made.id not in {k.id for k in c.api_keys()}
        with pytest.raises(NotFound):
            c.revoke_key(made.id)
        entries = c.audit(limit=10)
        root = next(k.id for k in c.api_keys() if k.name == "root")
        assert len(c.audit(limit=2)) == 2
    assert [e.at for e in entries] == sorted((e.at for e in entries), reverse=True)
    actions = [(e.action, e.key_id, e.status) for e in entries]
    assert ("create key", root, 201) in actions and ("revoke key", root, 204) in actions
    assert ("denied GET /v1/models", None, 401) in actions  # the revoked key's refusal


def test_a_429_is_retried_by_every_call_within_the_policy() -> None:
    quota = {"detail": "full", "limit": "max_stored_models", "max": 2}
    refused = from_response(429, quota, "30")
    assert isinstance(refused, RateLimited) and isinstance(refused, Unavailable)
    policy = Retry(attempts=2, max_delay=0.5, jitter=0)
    assert policy.after(refused, 1, idempotent=False) == 0.5  # Retry-After, capped
    assert policy.after(refused, 2, idempotent=False) is None  # attempts spent
    assert policy.after(Unavailable(503, "busy"), 1, idempotent=False) is None


def test_a_rate_limited_call_waits_its_retry_after(
    secured: tuple[str, str], name: str, caplog: pytest.LogCaptureFixture
) -> None:
    url, admin = secured
    with Client(url, api_key=admin, retry=FAST) as c:
        c.create_model(name, **SPARSE)
        slow = c.create_key("write", limits={"requests_per_second": 2, "burst": 1}).key
    accepted = 0
    with Client(url, api_key=slow, retry=Retry(attempts=1)) as once:
        with pytest.raises(RateLimited) as e:
            for _ in range(20):
                once.learn(name, X, 1)
                accepted += 1
        with pytest.raises(RateLimited) as closed, once.stream(name) as s:
            s.learn(X, 1)  # the handshake is a request too: closed with 4429
    assert accepted >= 2  # the bucket holds a second of the rate, and at least one request
    assert (e.value.status, e.value.limit, e.value.max) == (429, "requests_per_second", 2)
    assert e.value.retry_after is not None and e.value.retry_after > 0
    assert closed.value.status == 429 and closed.value.retry_after == 1.0
    patient = Retry(attempts=6, backoff=0.05, max_delay=2.0, jitter=0)
    with caplog.at_level(logging.DEBUG), Client(url, api_key=slow, retry=patient) as c:
        for _ in range(3):
            assert c.learn(name, X, -1).label == -1  # waits out the 429s
            accepted += 1
    waits = re.findall(r"failed \(429: .*\); retry \d of 5 in ([\d.]+) s", caplog.text)
    assert waits and all(float(w) >= 1.0 for w in waits)  # Retry-After, not the backoff
    assert slow not in caplog.text
    with Client(url, api_key=admin, retry=FAST) as c:
        m = c.model(name)
    assert m.counters.learned == m.version == accepted  # each accepted learn once, no refused one
