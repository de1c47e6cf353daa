"""Helpers for tests that run the real ``committee serve`` in its own processes.

:class:`Service` starts the command line as a child process group on a free loopback port
and waits for ``/readyz``; :func:`replay` rebuilds a model from its trial log in Redis the
way a fresh worker would, entry by entry, and records what each entry gave.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
from harness.redis_cluster import sync_client

from app.service.challenger import MODEL_STATE
from app.service.live_model import LiveModel
from storage.codec import decode_entry, encode_instance
from storage.keys import Keys

__all__ = [
    "Replay",
    "Service",
    "assert_same_state",
    "check_answers",
    "client_connections",
    "free_port",
    "learn_entries",
    "learn_some",
    "majority_model",
    "majority_payloads",
    "replay",
    "unread_requests",
    "wait_folded",
    "wait_ready",
]

START_TIMEOUT = 180.0  # seconds for `committee serve` to answer /readyz (it warms up first)
STOP_TIMEOUT = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Service:
    """``committee serve`` in a child process (its own session), stopped on exit.

    ``redis_url`` None lets the command start its private Redis in ``data_dir``. The
    output goes to ``<log_dir>/serve-<port>.log``, shown when the service fails to start.
    """

    def __init__(
        self,
        log_dir: Path,
        *,
        workers: int = 1,
        redis_url: str | None = None,
        data_dir: Path | None = None,
        prefix: str | None = None,
        env: dict[str, str] | None = None,
        log_level: str = "warning",
        args: list[str] | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.port = free_port()
        self.workers = workers
        self.log_path = log_dir / f"serve-{self.port}.log"
        command = [sys.executable, "-m", "app.cli.main", "serve", "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--workers", str(workers)]
        command += ["--log-level", log_level]
        if redis_url is not None:
            command += ["--redis-url", redis_url]
        if data_dir is not None:
            command += ["--data-dir", str(data_dir)]
        command += args or []
        # HTTPS with --tls-cert: ``verify`` checks the service's certificate
        self.scheme = "https" if "--tls-cert" in command else "http"
        self.verify = verify
        self.args = command
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("COMMITTEE_")}
        if prefix is not None:
            self.env["COMMITTEE_KEY_PREFIX"] = prefix
        self.env.update(env or {})
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def spawn(self) -> Service:
        """Start the command without waiting for it to be ready."""
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(
                self.args,
                env=self.env,
                cwd=Path(__file__).resolve().parents[2],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # one process group: the test can always clean up
            )
        return self

    def start(self) -> Service:
        """Spawn, and wait until every worker answers ``/readyz`` (each warms up alone)."""
        self.spawn()
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT
        ready: set[int] = set()  # workers that answered 200 (the serve process: 1 worker)
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"committee serve exited with {self.process.returncode}:\n{self.output()}"
                )
            pids = self.worker_pids() if self.workers > 1 else [self.pid]
            if len(pids) == max(self.workers, 1) and ready >= set(pids):
                return self
            # a fresh connection each time; while its keep-alive holds, it shows which
            # worker took it
            with httpx.Client(base_url=self.url, timeout=5, verify=self.verify) as c:
                try:
                    if c.get("/readyz").status_code == 200:
                        held = client_connections(pids, self.port)
                        ready.update(pid for pid, n in held.items() if n)
                except httpx.TransportError:
                    pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"committee serve was not ready:\n{self.output()}")
            time.sleep(0.02)

    def stop(self) -> int:
        """SIGTERM, as a process manager would, and wait; returns the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                # every thread's stack into the log, to show where it is stuck
                for pid in [self.pid, *self.worker_pids()]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGUSR1)
                time.sleep(1.0)
                self.kill()
                raise RuntimeError(
                    f"committee serve did not stop on SIGTERM:\n{self.output(20000)}"
                ) from None
        return int(self.process.returncode)

    def kill(self) -> None:
        """SIGKILL the whole process group (workers and a private Redis included)."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def worker_pids(self) -> list[int]:
        """The uvicorn worker processes: children of the serve process forked from it (or
        started by multiprocessing's spawn), not a private Redis."""
        out = []
        try:
            serve = Path(f"/proc/{self.pid}/cmdline").read_bytes()
        except OSError:
            return []
        for pid in children(self.pid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if cmdline == serve or b"spawn_main" in cmdline:
                out.append(pid)
        return sorted(out)

    def output(self, tail: int = 5000) -> str:
        """The last ``tail`` characters the service wrote (0: all)."""
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def __enter__(self) -> Service:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            # stragglers of the group (a private Redis runs in a session of its own)
            self.kill()


def children(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` (from /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may hold spaces and parentheses
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[1]) == pid:
            out.append(int(d.name))
    return out


def majority_model(name: str, n: int = 20, k: int = 5) -> dict[str, Any]:
    """A committee over S4's majority problem: n named experts voting a label, plus one
    threshold sub-expert per class (the N = n + k sub-experts of MajorityProblem)."""
    return {
        "name": name,
        "labels": list(range(k)),
        "input": {
            "experts": {
                "expert_names": [f"e{i}" for i in range(n)],
                "threshold_experts": True,
            }
        },
        "learner": {"kind": "committee", "alpha": 1.2},
    }


def majority_payloads(count: int, rng: np.random.Generator) -> list[tuple[dict[str, Any], int]]:
    """``count`` (instance payload, label) pairs of MajorityProblem(n=20, r=10, k=5, 5 % noise)."""
    from models.inputs.datasets import MajorityProblem

    problem = MajorityProblem(n=20, r=10, k=5, noise=0.05)
    votes = problem.sample_votes(count, rng)
    ys = problem.add_noise(problem.clean_labels(votes), rng)
    return [
        ({"experts": {f"e{i}": int(c) for i, c in enumerate(v)}}, int(y))
        for v, y in zip(votes, ys, strict=True)
    ]


@dataclass
class Replay:
    """A model rebuilt from its log, and what each log entry gave when replayed."""

    model: LiveModel
    kinds: dict[int, str] = field(default_factory=dict)  # seq -> "label" | "learn"
    trial_seq: dict[str, list[int]] = field(default_factory=dict)  # trial id -> seqs
    x: dict[int, bytes] = field(default_factory=dict)  # seq -> stored instance
    y: dict[int, int] = field(default_factory=dict)
    predicted: dict[int, int] = field(default_factory=dict)  # served, or own at replay
    own: dict[int, int] = field(default_factory=dict)  # the learner's own at replay
    updated: dict[int, bool] = field(default_factory=dict)
    # predictions that differ from the hypothesis at their version, by version
    at_version: dict[int, list[Any]] = field(default_factory=dict)
    states: dict[int, Any] = field(default_factory=dict)  # exported state, by version

    @property
    def mistakes(self) -> int:
        return sum(self.predicted[s] != self.y[s] for s in self.y)

    @property
    def updates(self) -> int:
        return sum(self.updated.values())


def replay(
    redis_url: str,
    prefix: str,
    name: str,
    predictions: dict[int, list[tuple[dict[str, Any], Any, dict[str, float]]]] | None = None,
    states_at: frozenset[int] = frozenset(),
) -> Replay:
    """Read model ``name``'s config and whole log from Redis and replay it in a fresh
    :class:`LiveModel`, one entry at a time.

    ``predictions`` maps a model version to served predictions (instance payload, label,
    scores) said to be made at that version: each is checked against the replayed
    hypothesis at that version, and any that differ are collected in ``at_version``.
    The exported state (as JSON) at each version of ``states_at`` is kept in ``states``.
    """
    keys = Keys(prefix, name)
    with sync_client(redis_url) as r:
        meta = r.hgetall(keys.meta)
        raw = r.xrange(keys.log, "-", "+")
        snapshots = r.hgetall(keys.snapshot)
    config = orjson.loads(meta[b"config"])
    model = LiveModel(name, meta[b"incarnation"].decode(), config)
    out = Replay(model)
    predictions = predictions or {}
    learner = model.learner

    def check(version: int) -> None:
        if version in states_at:
            out.states[version] = orjson.loads(model.export())
        for payload, label, scores in predictions.get(version, []):
            c, s = model.predict(model.encode(payload))
            got = (
                model.labels[c],
                {str(lab): float(v) for lab, v in zip(model.labels, s, strict=True)},
            )
            if got != (label, scores):
                out.at_version.setdefault(version, []).append((payload, (label, scores), got))

    check(0)
    for entry_id, fields in raw:
        flat = [v for kv in fields.items() for v in kv]
        e = decode_entry(entry_id, flat, model.size, model.k)
        if e.kind == "change":  # the input grows: so does the learner, a new one
            model.apply([(entry_id, flat)])
            assert model.version == e.seq and model.quarantined == 0, f"entry {e.seq}"
            learner = model.learner
            out.kinds[e.seq] = e.kind
            check(e.seq)
            continue
        if e.kind == "reset":  # an import or rollback: the state the snapshot kept there
            held = {
                int(snapshots[f"{p}version".encode()]): p
                for p in ("", "p_")
                if f"{p}version".encode() in snapshots
            }
            assert e.seq in held, f"entry {e.seq}: no snapshot holds the state it reset to"
            p = held[e.seq]
            space = snapshots.get(f"{p}c".encode()) or b""  # the input there (b"": as made)
            model = LiveModel(
                name,
                model.incarnation,
                config,
                version=e.seq,
                state=snapshots[f"{p}state".encode()],
                space=orjson.loads(space) if space else None,
            )
            out.model, learner = model, model.learner
            out.kinds[e.seq] = e.kind
            check(e.seq)
            continue
        own, _ = model.predict(e.x)
        mistakes, updates = learner.mistakes_, learner.updates_
        model.apply([(entry_id, flat)])
        assert learner.mistakes_ - mistakes == int(own != e.y), f"entry {e.seq}: mistake"
        assert model.version == e.seq
        out.kinds[e.seq] = e.kind
        out.x[e.seq] = fields[b"x"]
        out.y[e.seq] = e.y
        out.own[e.seq] = own
        out.updated[e.seq] = learner.updates_ > updates
        if e.kind == "label":
            assert e.predicted is not None
            out.predicted[e.seq] = e.predicted
            out.trial_seq.setdefault(e.trial_id, []).append(e.seq)
        else:  # a learn trial is judged against the learner's own prediction at replay
            out.predicted[e.seq] = own
        check(e.seq)
    return out


def learn_entries(rep: Replay) -> dict[bytes, list[int]]:
    """The seqs of learn entries, by stored instance."""
    out: dict[bytes, list[int]] = {}
    for seq, kind in rep.kinds.items():
        if kind == "learn":
            out.setdefault(rep.x[seq], []).append(seq)
    return out


def check_answers(
    rep: Replay,
    predicted: list[tuple[dict[str, Any], dict[str, Any]]],
    labelled: list[tuple[str, Any, dict[str, Any]]],
    learned: list[tuple[dict[str, Any], Any, dict[str, Any]]],
) -> None:
    """Every acknowledged answer is in the log once and is what replaying it gives.

    ``predicted`` holds (instance payload, answer) of predictions, ``labelled`` (trial
    id, label, answer) and ``learned`` (instance payload, label, answer) of trials.
    """
    m = rep.model
    assert rep.at_version == {}, "predictions not made by the hypothesis at their version"
    assert {t: s for t, s in rep.trial_seq.items() if len(s) > 1} == {}, "labels applied twice"
    served = {p["trial_id"]: p["label"] for _, p in predicted}
    for t, y, got in labelled:
        assert t in rep.trial_seq, f"acknowledged label of trial {t} is not in the log"
        [seq] = rep.trial_seq[t]
        assert m.labels[rep.y[seq]] == y, f"trial {t}: logged label {rep.y[seq]}, acknowledged {y}"
        p = m.labels[rep.predicted[seq]]
        assert p == served[t], f"trial {t}: logged prediction {p}, served {served[t]}"
        expect = {"trial_id": t, "predicted": p, "label": y, "mistake": p != y}
        expect["updated"] = rep.updated[seq]
        assert got == expect, f"trial {t}: answered {got}, the log gives {expect}"
    by_x = learn_entries(rep)
    for x, y, got in learned:
        seqs = by_x.get(encode_instance(m.encode(x)), [])
        assert len(seqs) == 1, f"acknowledged learn trial in the log {len(seqs)} times: {x}"
        seq = seqs[0]
        assert m.labels[rep.y[seq]] == y
        p = m.labels[rep.predicted[seq]]
        expect = {"predicted": p, "label": y, "mistake": p != y, "updated": rep.updated[seq]}
        assert got == expect, f"learn entry {seq}: answered {got}, the log gives {expect}"


def learn_some(
    c: httpx.Client, name: str, data: Iterator[tuple[dict[str, Any], int]], n: int
) -> None:
    """Learn n trials, half one by one, half in one batch."""
    items = [{"instance": x, "label": y} for x, y in (next(data) for _ in range(n))]
    for item in items[: n // 2]:
        r = c.post(f"/v1/models/{name}/learn", json=item)
        assert r.status_code == 200, r.text
    r = c.post(f"/v1/models/{name}/learn/batch", json={"items": items[n // 2 :]})
    assert r.status_code == 200, r.text
    assert all(item["result"] is not None for item in r.json()["items"])


def wait_ready(c: httpx.Client, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while c.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, "the service did not become ready again"
        time.sleep(0.05)


def wait_folded(client: httpx.Client, name: str, timeout: float = 30.0) -> dict[str, Any]:
    """The model once its counters include every trial (``folded == version``)."""
    deadline = time.monotonic() + timeout
    while True:
        got = client.get(f"/v1/models/{name}")
        assert got.status_code == 200, got.text
        body: dict[str, Any] = got.json()
        if body["folded"] == body["version"]:
            return body
        assert time.monotonic() < deadline, f"counters not folded: {body}"
        time.sleep(0.05)


def learner_state(kept: bytes) -> Any:
    """The learner's state in a snapshot's (which may hold challengers' and monitors')."""
    doc = orjson.loads(kept)
    return doc["learner"] if isinstance(doc, dict) and doc.get("format") == MODEL_STATE else doc


def assert_same_state(a: Any, b: Any, where: str = "state") -> None:
    """Exact equality of two exported states (JSON documents: arrays as lists or base64)."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict) and a.keys() == {"dtype", "shape", "data"} == b.keys():
        assert (a["dtype"], a["shape"]) == (b["dtype"], b["shape"]), where
        if a["data"] != b["data"]:
            u, v = (np.frombuffer(base64.b64decode(d["data"]), a["dtype"]) for d in (a, b))
            differ = np.flatnonzero(u != v)
            raise AssertionError(
                f"{where}: {differ.size} of {u.size} elements differ, first at "
                f"{differ[0]}: {u[differ[0]]!r} != {v[differ[0]]!r}"
            )
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            assert_same_state(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), f"{where}: length {len(a)} != {len(b)}"
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            assert_same_state(u, v, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _established(port: int) -> dict[str, int]:
    """The established TCP connections to ``port``: socket inode -> bytes received that the
    owning process has not read yet."""
    out = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            local_port = int(f[1].rsplit(":", 1)[1], 16)
            if local_port == port and f[3] == "01":  # ESTABLISHED
                out[f[9]] = int(f[4].split(":")[1], 16)  # tx_queue:rx_queue
    return out


def _sockets(pid: int) -> set[str]:
    """The inodes of the sockets process ``pid`` holds open (none once it is gone)."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return set()
    out = set()
    for fd in fds:
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out


def client_connections(pids: list[int], port: int) -> dict[int, int]:
    """How many established TCP connections to ``port`` each process holds."""
    connections = _established(port)
    return {pid: len(_sockets(pid) & connections.keys()) for pid in pids}


def unread_requests(pid: int, port: int) -> int:
    """How many of process ``pid``'s connections to ``port`` hold bytes it has not read: of
    a stopped worker, the requests sent to it since it stopped."""
    connections = _established(port)
    return sum(1 for inode in _sockets(pid) if connections.get(inode, 0) > 0)
