"""Deployed classifiers for the fan-out's tests and benchmark: a real MLServer serving
scikit-learn models over the Open Inference Protocol (v2), and a plain JSON server.

MLServer 1.7 pins FastAPI below the service's, so it lives in a virtual environment of
its own in the user's cache directory (``committee-mlserver-<version>-py<X.Y>``, see
:data:`VENV`), made once for every checkout (``./run test`` makes it by running this
file; :func:`mlserver_bin` makes it when missing) and reused. The models are written as
MLServer's own format (a joblib file and ``model-settings.json`` each) to a directory
the caller gives, and the server runs in a session of its own on free loopback ports,
until :meth:`MLServer.stop` (or :meth:`MLServer.kill`).

:class:`JsonServer` is a tiny ASGI app served by uvicorn in a thread: ``POST /score``
answers ``{"scores": {label: score}}``, and ``POST /v2/models/{name}/infer`` answers as
MLServer does, from scikit-learn models in this process; each route can be made slow,
garbage, huge, failing or a redirect (:attr:`JsonServer.mode`), and it keeps the rows
of each request it was sent (:attr:`JsonServer.batches`).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import joblib
import uvicorn

MLSERVER = "mlserver==1.7.1"
MLSERVER_SKLEARN = "mlserver-sklearn==1.7.1"
# a pinned tool's environment, as a package cache keeps it: keyed on its version and
# the Python it runs on, shared by every checkout
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
PYTHON = "{}.{}".format(*sys.version_info)
VENV = CACHE / f"committee-{MLSERVER.replace('==', '-')}-py{PYTHON}"
START_TIMEOUT = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mlserver_bin() -> Path:
    """The ``mlserver`` command of :data:`VENV`, the environment made first when missing
    (once, under a lock, whichever process asks first). One whose install did not finish
    (killed midway) has no mark of it and is made again."""
    exe, done = VENV / "bin" / "mlserver", VENV / ".installed"
    if done.exists():
        return exe
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(f"{VENV}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            print(f"installing {MLSERVER} into {VENV}...", file=sys.stderr)
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
            subprocess.run(
                [str(VENV / "bin" / "pip"), "install", "-q", MLSERVER, MLSERVER_SKLEARN],
                check=True,
            )
            done.touch()
    return exe


class MLServer:
    """``mlserver start`` serving ``models`` (name -> fitted scikit-learn classifier)
    from ``root``, on loopback; ``url`` is its HTTP base URL."""

    def __init__(self, root: Path, models: dict[str, Any]) -> None:
        self.root = root
        self.models = models
        self.http_port, self.grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.proc: subprocess.Popen[bytes] | None = None
        root.mkdir(parents=True, exist_ok=True)
        settings = {
            "host": "127.0.0.1",
            "http_port": self.http_port,
            "grpc_port": self.grpc_port,
            "metrics_endpoint": None,  # no metrics server, so no third port
            "parallel_workers": 0,  # inference in the server's own process
            "debug": False,
        }
        (root / "settings.json").write_text(json.dumps(settings))
        for name, estimator in models.items():
            where = root / name
            where.mkdir(exist_ok=True)
            joblib.dump(estimator, where / "model.joblib")
            doc = {
                "name": name,
                "implementation": "mlserver_sklearn.SKLearnModel",
                "parameters": {"uri": "./model.joblib", "version": "v1"},
            }
            (where / "model-settings.json").write_text(json.dumps(doc))

    def start(self) -> MLServer:
        exe = mlserver_bin()
        log = open(self.root / "mlserver.log", "wb")  # noqa: SIM115 (the child's, closed below)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLSERVER", "PROMETHEUS"))}
        self.proc = subprocess.Popen(
            [str(exe), "start", str(self.root)],
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        with httpx.Client(timeout=2) as c:
            pending = set(self.models)
            while pending:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    tail = (self.root / "mlserver.log").read_text()[-2000:]
                    raise RuntimeError(f"MLServer did not start:\n{tail}")
                for name in list(pending):
                    try:
                        if c.get(f"{self.url}/v2/models/{name}/ready").status_code == 200:
                            pending.discard(name)
                    except httpx.HTTPError:
                        pass
                if pending:
                    time.sleep(0.2)
        return self

    def kill(self) -> None:
        """Gone at once, as a crashed classifier is."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> MLServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class JsonServer:
    """A plain JSON classifier server on loopback (see the module docstring).

    ``scorers`` maps a name to a function from one row of inputs to ``{label: score}``
    (``/score/<name>``) or to a row of probabilities (``/v2/models/<name>/infer``).
    ``mode[name]`` is ``"ok"``, ``"slow"`` (answers after ``slow_seconds``),
    ``"garbage"``, ``"huge"`` (a 2 MB answer), ``"fail"`` (500) or ``"redirect"`` (307 to
    ``redirect_to``). ``secret``, when set, is the Authorization header it requires.
    """

    def __init__(
        self,
        scorers: dict[str, Callable[[list[float]], Any]],
        host: str = "127.0.0.1",
    ) -> None:
        self.scorers = scorers
        self.mode: dict[str, str] = dict.fromkeys(scorers, "ok")
        self.slow_seconds = 1.0
        self.redirect_to = ""
        self.secret: str | None = None
        self.batches: dict[str, list[int]] = {name: [] for name in scorers}
        self.hits = 0
        self.port = free_port()
        self.url = f"http://{host}:{self.port}"
        config = uvicorn.Config(
            self.app,
            host=host,
            port=self.port,
            log_level="warning",
            lifespan="off",
            interface="asgi3",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        self.hits += 1
        status, doc, headers = await self._answer(scope, body)
        raw = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), *headers],
            }
        )
        await send({"type": "http.response.body", "body": raw})

    async def _answer(self, scope: dict[str, Any], body: bytes) -> tuple[int, Any, list[Any]]:
        path: str = scope["path"]
        if self.secret is not None:
            got = dict(scope["headers"]).get(b"authorization", b"").decode()
            if got != self.secret:
                return 401, {"error": "unauthorized"}, []
        v2 = path.startswith("/v2/models/")
        name = path.split("/")[3] if v2 else path.rsplit("/", 1)[-1]
        if name not in self.scorers:
            return 404, {"error": f"no model {name}"}, []
        mode = self.mode[name]
        if mode == "slow":
            await asyncio.sleep(self.slow_seconds)
        elif mode == "garbage":
            return 200, b'{"outputs": [{"name": 1}], "scores": "no"', []
        elif mode == "huge":
            return 200, {"scores": {"pad": "x" * 2_000_000}}, []
        elif mode == "fail":
            return 500, {"error": "down"}, []
        elif mode == "redirect":
            return 307, {}, [(b"location", self.redirect_to.encode())]
        doc = json.loads(body)
        score = self.scorers[name]
        if not v2:
            return 200, {"scores": score(doc)}, []
        tensor = doc["inputs"][0]
        rows, width = tensor["shape"]
        self.batches[name].append(rows)
        data = tensor["data"]
        out = [score(data[i * width : (i + 1) * width]) for i in range(rows)]
        flat = [v for row in out for v in row]
        outputs = [
            {
                "name": "predict_proba",
                "shape": [rows, len(out[0])],
                "datatype": "FP64",
                "data": flat,
            }
        ]
        return 200, {"model_name": name, "outputs": outputs}, []

    def __enter__(self) -> JsonServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the JSON server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


if __name__ == "__main__":  # ./run test: make the environment before the tests need it
    print(mlserver_bin())
