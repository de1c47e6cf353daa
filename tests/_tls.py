"""TLS for tests: a throwaway CA with server and client certificates for loopback, made
with the ``openssl`` command line, and a ``redis-server`` that speaks only TLS."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import redis

__all__ = ["Certificates", "TlsRedis", "make_certificates"]

START_TIMEOUT = 10.0


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_ca: Path  # a CA that signed none of these


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


def _make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}-key.pem"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", f"/CN={name}", "-keyout", key, "-out", cert,
    )  # fmt: skip
    return cert, key


def _signed(
    directory: Path, name: str, ca: tuple[Path, Path], extensions: str
) -> tuple[Path, Path]:
    cert, key, csr = (directory / f"{name}{s}" for s in (".pem", "-key.pem", ".csr"))
    ext = directory / f"{name}.ext"
    ext.write_text(extensions)
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
        "-keyout", key, "-out", csr,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
        "-days", "2", "-extfile", ext, "-out", cert,
    )  # fmt: skip
    return cert, key


def make_certificates(directory: Path) -> Certificates:
    """A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate,
    all signed by it; and another CA that signed nothing here."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the TLS tests need the openssl command")
    directory.mkdir(parents=True, exist_ok=True)
    ca = _make_ca(directory, "test-ca")
    server = _signed(
        directory,
        "server",
        ca,
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    client = _signed(directory, "client", ca, "extendedKeyUsage=clientAuth\n")
    stranger, _ = _make_ca(directory, "stranger-ca")
    return Certificates(ca[0], *server, *client, stranger)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TlsRedis:
    """``redis-server`` on a loopback TLS port (and no plain one) in ``directory``;
    ``clients_need_certificates`` is Redis's ``tls-auth-clients``."""

    def __init__(
        self, directory: Path, certs: Certificates, *, clients_need_certificates: bool = True
    ) -> None:
        self.directory = directory
        self.certs = certs
        self.port = _free_port()
        self.auth_clients = "yes" if clients_need_certificates else "no"
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, *, client_certificate: bool = True, ca: Path | None = None) -> str:
        """A ``rediss://`` URL trusting ``ca`` (the test CA by default)."""
        query = f"ssl_ca_certs={ca or self.certs.ca}"
        if client_certificate:
            query += f"&ssl_certfile={self.certs.client_cert}&ssl_keyfile={self.certs.client_key}"
        return f"rediss://127.0.0.1:{self.port}/0?{query}"

    def __enter__(self) -> TlsRedis:
        c = self.certs
        args = ["redis-server", "--port", "0", "--tls-port", str(self.port)]
        args += ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(self.directory), "--tls-cert-file", str(c.server_cert)]
        args += ["--tls-key-file", str(c.server_key), "--tls-ca-cert-file", str(c.ca)]
        args += ["--tls-auth-clients", self.auth_clients]
        log = open(self.directory / "redis-tls.log", "wb")
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                with redis.Redis.from_url(self.url(), socket_timeout=1) as r:
                    r.ping()
                return self
            except (redis.ConnectionError, OSError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.__exit__(None, None, None)
                    text = (self.directory / "redis-tls.log").read_text(errors="replace")
                    raise RuntimeError(f"the TLS redis-server did not start:\n{text}") from None
                time.sleep(0.05)

    def __exit__(
        self,
        t: type[BaseException] | None,
        e: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
