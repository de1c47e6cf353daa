"""Both Redis clients over TLS (``rediss://``) to a ``redis-server`` that speaks only TLS:
verified against the test CA, with a client certificate when Redis asks for one; a
server the client cannot verify is unavailable, not a hang or a raw ssl error."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from _tls import Certificates, TlsRedis, make_certificates

from storage.client import close, connect
from storage.errors import Unavailable
from storage.resp import Connection, parse_url


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory, certs: Certificates) -> Iterator[TlsRedis]:
    with TlsRedis(tmp_path_factory.mktemp("tls-redis"), certs) as server:
        yield server


async def _round_trip(url: str) -> tuple[bytes, bytes]:
    clients = connect(url, timeout=3)
    try:
        await clients.scripts.call("SET", "tls-probe", "via the pipelined connection")
        await clients.redis.set("tls-probe-2", "via redis-py")
        a = await clients.redis.get("tls-probe")
        b = await clients.scripts.call("GET", "tls-probe-2")
        return a, b
    finally:
        await close(clients)


def test_both_clients_speak_tls_with_a_client_certificate(tls_redis: TlsRedis) -> None:
    got = asyncio.run(_round_trip(tls_redis.url()))
    assert got == (b"via the pipelined connection", b"via redis-py")


def test_a_server_outside_the_trusted_ca_is_unavailable(
    tls_redis: TlsRedis, certs: Certificates
) -> None:
    url = tls_redis.url(ca=certs.stranger_ca)

    async def call() -> None:
        conn = Connection(url, timeout=3)
        try:
            await conn.call("PING")
        finally:
            await conn.aclose()

    with pytest.raises(Unavailable, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify"):
        asyncio.run(call())


def test_without_its_certificate_the_client_is_refused(tls_redis: TlsRedis) -> None:
    async def call() -> None:
        conn = Connection(tls_redis.url(client_certificate=False), timeout=3)
        try:
            await conn.call("PING")
        finally:
            await conn.aclose()

    with pytest.raises(Unavailable):
        asyncio.run(call())


def test_a_server_that_asks_no_client_certificate_needs_only_the_ca(
    tmp_path: Path, certs: Certificates
) -> None:
    with TlsRedis(tmp_path, certs, clients_need_certificates=False) as server:
        got = asyncio.run(_round_trip(server.url(client_certificate=False)))
    assert got[0] == b"via the pipelined connection"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("rediss://h:1/0?ssl_ca_cert=x", "unknown option 'ssl_ca_cert'"),
        ("redis://h:1/0?ssl_ca_certs=x", "need a rediss:// URL"),
        ("rediss://h:1/0?ssl_cert_reqs=maybe", "ssl_cert_reqs must be"),
        ("rediss://h:1/0?ssl_check_hostname=perhaps", "ssl_check_hostname must be"),
    ],
)
def test_bad_tls_options_are_named(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_url(url)


def test_tls_options_are_read() -> None:
    a = parse_url("rediss://:pw@h:7/2?ssl_ca_certs=/ca.pem&ssl_certfile=/c.pem&ssl_keyfile=/k.pem")
    assert (a.tls, a.verify, a.ca_certs, a.certfile, a.keyfile, a.db) == (
        True,
        True,
        "/ca.pem",
        "/c.pem",
        "/k.pem",
        2,
    )
    assert not parse_url("rediss://h/0?ssl_cert_reqs=none").verify
    assert not parse_url("rediss://h/0?ssl_check_hostname=false").check_hostname
