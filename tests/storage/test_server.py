"""EmbeddedRedis: start and stop, persistence through the append-only file, leftovers of a
crashed run, several servers at once, and the errors it reports."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import redis

from storage.server import (
    LOCK_NAME,
    PID_NAME,
    SOCKET_NAME,
    EmbeddedRedis,
    RedisServerError,
    find_redis_server,
)


def client(server: EmbeddedRedis) -> redis.Redis:
    return redis.Redis.from_url(server.url, socket_timeout=5)


def test_start_answers_on_a_unix_socket_and_stop_ends_it(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path).start()
    try:
        assert server.running
        assert server.url == f"unix://{tmp_path / SOCKET_NAME}"
        with client(server) as c:
            assert c.ping()
            assert c.config_get("appendonly") == {"appendonly": "yes"}
            assert c.config_get("save") == {"save": ""}
            assert c.config_get("port") == {"port": "0"}
    finally:
        server.stop()
    assert not server.running
    assert not (tmp_path / SOCKET_NAME).exists()
    with pytest.raises(RedisServerError, match="not running"):
        _ = server.url
    server.stop()  # stopping twice is harmless


def test_data_survives_a_restart_in_the_same_directory(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path) as server, client(server) as c:
        c.set("greeting", "hello")
        c.rpush("log", 1, 2, 3)
    assert (tmp_path / "appendonlydir").is_dir()
    with EmbeddedRedis(tmp_path) as server, client(server) as c:
        assert c.get("greeting") == b"hello"
        assert c.lrange("log", 0, -1) == [b"1", b"2", b"3"]


def test_appendfsync_is_configurable(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path, appendfsync="always") as server, client(server) as c:
        assert c.config_get("appendfsync") == {"appendfsync": "always"}
    with pytest.raises(ValueError, match="appendfsync"):
        EmbeddedRedis(tmp_path, appendfsync="sometimes")


def test_leftovers_of_a_crashed_run_do_not_prevent_starting(tmp_path: Path) -> None:
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(tmp_path / SOCKET_NAME))  # a socket file nobody listens on
    stale.close()
    (tmp_path / PID_NAME).write_text("999999\n")
    (tmp_path / LOCK_NAME).touch()
    with EmbeddedRedis(tmp_path) as server, client(server) as c:
        assert c.ping()


def test_a_killed_server_leaves_nothing_that_blocks_the_next(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path).start()
    with client(server) as c:
        c.set("k", "v")
    server._kill()  # as if it crashed: the socket file stays behind
    assert (tmp_path / SOCKET_NAME).exists()
    server.stop()
    with EmbeddedRedis(tmp_path) as again, client(again) as c:
        assert c.get("k") == b"v"  # appendfsync everysec may lose the last second, not here


def test_a_server_that_died_on_its_own_can_be_started_again(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path, binary="redis-server").start()
    try:
        server._kill()
        assert not server.running
        with client(server.start()) as c:
            assert c.ping()
    finally:
        server.stop()


def test_two_servers_in_two_directories_at_once(tmp_path: Path) -> None:
    with (
        EmbeddedRedis(tmp_path / "a") as a,
        EmbeddedRedis(tmp_path / "b") as b,
        client(a) as ca,
        client(b) as cb,
    ):
        assert a.url != b.url
        ca.set("k", "a")
        cb.set("k", "b")
        assert ca.get("k") == b"a"
        assert cb.get("k") == b"b"


def test_a_second_server_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path) as first:
        with pytest.raises(RedisServerError, match="already uses"):
            EmbeddedRedis(tmp_path).start()
        with client(first) as c:
            assert c.ping()  # the refused start did not touch the running server's socket


def test_a_long_directory_gets_a_loopback_tcp_port(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120)
    with EmbeddedRedis(deep) as server, client(server) as c:
        assert server.url.startswith("redis://127.0.0.1:")
        assert c.config_get("bind") == {"bind": "127.0.0.1"}
        assert not (deep / SOCKET_NAME).exists()


def test_a_missing_binary_is_a_clear_error(tmp_path: Path) -> None:
    bogus = str(tmp_path / "no-such-redis-server")
    with pytest.raises(RedisServerError, match="no-such-redis-server"):
        EmbeddedRedis(tmp_path, binary=bogus).start()
    # the failed start released the directory
    with EmbeddedRedis(tmp_path) as server, client(server) as c:
        assert c.ping()


def test_a_server_that_exits_at_once_reports_its_log(tmp_path: Path) -> None:
    fake = tmp_path / "fake-redis-server"
    fake.write_text("#!/bin/sh\necho 'FATAL: cannot start' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(RedisServerError, match=r"(?s)exited with code 1.*FATAL: cannot start"):
        EmbeddedRedis(tmp_path / "data", binary=str(fake)).start()


def test_find_redis_server_or_say_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    assert find_redis_server()
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(RedisServerError, match="install"):
        find_redis_server()


def test_the_session_fixtures(redis_url: str, redis_prefix: str) -> None:
    assert not redis_url.endswith(":6379/0")
    with redis.Redis.from_url(redis_url) as c:
        c.set(f"{redis_prefix}:k", "v")
        assert c.get(f"{redis_prefix}:k") == b"v"
    assert redis_prefix.startswith("t-")
