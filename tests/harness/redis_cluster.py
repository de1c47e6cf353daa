"""A local Redis Cluster of 3 primaries and 3 replicas (``redis-server`` processes on free
loopback ports), for tests and benchmarks; each process runs in a session of its own, and
all are stopped on exit."""

from __future__ import annotations

import contextlib
import functools
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from redis.cluster import ClusterNode

from storage.server import find_redis_server

START_TIMEOUT = 30.0


# every data node: an append-only file, no snapshots, and a primary that starts a
# replica's full copy at once, not after Redis's default 5 s wait for other replicas to
# share one transfer
DATA = ["--appendonly", "yes", "--save", "", "--repl-diskless-sync-delay", "0"]

BUS_OFFSET = 10_000  # a cluster node's bus listens this far above its port


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out on its own (to ``bind(0)`` and to outgoing
    connections)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports whose cluster bus ports are free too, drawn below the
    kernel's own range, so that no ``bind(0)`` or outgoing connection of another process
    takes one between this choice and the node's start."""
    low = 10_000
    high = max(_ephemeral_low() - BUS_OFFSET, low + 1_000)
    rng = random.Random()
    ports: list[int] = []
    while len(ports) < n:
        port = rng.randrange(low, high)
        if port in ports:
            continue
        try:
            for p in (port, port + BUS_OFFSET):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        ports.append(port)
    return ports


class _Nodes:
    """Redis processes on ``ports`` under ``data_dir``: waiting on them, their logs, and
    stopping them all."""

    data_dir: Path
    processes: dict[int, subprocess.Popen[bytes]]

    @property
    def ports(self) -> list[int]:
        raise NotImplementedError

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)

    def _await(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if ready():
                    return
            except (redis.RedisError, OSError) as e:
                last = e
            time.sleep(0.05)
        raise RuntimeError(f"waited {START_TIMEOUT:g} s for {what} ({last}):\n{self.log_tail()}")

    def log_tail(self, lines: int = 10) -> str:
        out = []
        for port in self.ports:
            log = self.data_dir / str(port) / "redis.log"
            with contextlib.suppress(OSError):
                out += [f"{port}: {line}" for line in log.read_text().splitlines()[-lines:]]
        return "\n".join(out)

    def stop(self) -> None:
        for p in self.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        for p in self.processes.values():
            p.wait()
        self.processes.clear()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RedisCluster(_Nodes):
    """``redis+cluster://`` over six nodes in ``data_dir`` (3 primaries, 3 replicas)."""

    def __init__(self, data_dir: Path, *, nodes: int = 6) -> None:
        self.data_dir = Path(data_dir)
        self._ports = free_ports(nodes)
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def seed_url(self) -> str:
        """Every node as a seed: the URL still works once any of them is down."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    @property
    def ports(self) -> list[int]:
        return self._ports

    def start(self) -> RedisCluster:
        binary = find_redis_server()
        try:
            for port in self.ports:
                self._launch(binary, port)
            for port in self.ports:
                self._await(functools.partial(self._answers, port), f"node {port} to answer")
            create = [binary.replace("redis-server", "redis-cli"), "--cluster", "create"]
            create += [f"127.0.0.1:{p}" for p in self.ports]
            create += ["--cluster-replicas", "1", "--cluster-yes"]
            done = subprocess.run(create, capture_output=True, timeout=60, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout[-2000:]!r}")
            self._await(self._healthy, "the cluster to be ok with every replica in sync")
        except BaseException:
            self.stop()
            raise
        return self

    def node_id(self, port: int) -> str:
        return str(self.client(port).execute_command("CLUSTER", "MYID").decode())

    def migrate_slot(self, slot: int, to_port: int, *, batch: int = 10, pause: float = 0.0) -> int:
        """Move ``slot`` to the primary on ``to_port`` as ``redis-cli --cluster reshard``
        does: mark it importing and migrating, MIGRATE its keys ``batch`` at a time
        (``pause`` seconds apart, so that clients meet the slot half moved: ASK), then give
        it to the target on every node (MOVED). Returns the keys moved."""
        src = self.primary_of_slot(slot)
        src_id, dst_id = self.node_id(src), self.node_id(to_port)
        self.client(to_port).execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        self.client(src).execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        moved = 0
        while True:
            keys = self.client(src).execute_command("CLUSTER", "GETKEYSINSLOT", slot, batch)
            if not keys:
                break
            self.client(src).execute_command(
                "MIGRATE", "127.0.0.1", to_port, "", 0, 5000, "KEYS", *keys
            )
            moved += len(keys)
            time.sleep(pause)
        for port in self.ports:
            with contextlib.suppress(redis.RedisError):
                self.client(port).execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        return moved

    def primary_of_slot(self, slot: int) -> int:
        for start, end, primary, *_ in self.client(self.ports[0]).execute_command(
            "CLUSTER", "SLOTS"
        ):
            if start <= slot <= end:
                return int(primary[1])
        raise LookupError(f"no node serves slot {slot}")

    def primaries(self) -> list[int]:
        """The ports of the primaries serving slots."""
        out = set()
        for _, _, primary, *_ in self.client(self.ports[0]).execute_command("CLUSTER", "SLOTS"):
            out.add(int(primary[1]))
        return sorted(out)

    def restart(self, port: int) -> None:
        """Start the node on ``port`` again (after a kill): it rejoins the cluster, as a
        replica if another node took over its slots meanwhile."""
        self.processes.pop(port).wait()
        self._launch(find_redis_server(), port)
        self._await(self._healthy, f"node {port} to rejoin")

    def _launch(self, binary: str, port: int) -> None:
        d = self.data_dir / str(port)
        d.mkdir(parents=True, exist_ok=True)
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d)]
        args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        args += ["--cluster-node-timeout", "1000", *DATA]
        with open(d / "redis.log", "ab") as log:
            self.processes[port] = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _answers(self, port: int) -> bool:
        return bool(self.client(port).ping())

    def _healthy(self) -> bool:
        for port in self.ports:
            info = self.client(port).execute_command("CLUSTER", "INFO")
            if b"cluster_state:ok" not in info:
                return False
            role = self.client(port).info("replication")
            if role["role"] == "slave" and role.get("master_link_status") != "up":
                return False
        return True

    def slot_of(self, key: str) -> int:
        return int(self.client(self.ports[0]).execute_command("CLUSTER", "KEYSLOT", key))

    def primary_of_key(self, key: str) -> int:
        """The port of the primary serving ``key``'s slot."""
        return self.primary_of_slot(self.slot_of(key))

    def replica_of_key(self, key: str) -> int:
        """The pid of a replica of the primary serving ``key``'s slot."""
        primary = self.primary_of_key(key)
        for port in self.ports:
            info = self.client(port).info("replication")
            if info["role"] == "slave" and int(info["master_port"]) == primary:
                return self.processes[port].pid
        raise LookupError(f"the primary on port {primary} has no replica")

    def __enter__(self) -> RedisCluster:
        return self.start()


def sync_client(url: str) -> redis.Redis | redis.RedisCluster:
    """A redis-py client for any URL the service takes but Sentinel's: a cluster's
    client for ``redis+cluster://`` (to read or write keys directly)."""
    if url.startswith("redis+cluster://"):
        seeds = []
        for node in url.removeprefix("redis+cluster://").split(","):
            host, _, port = node.rpartition(":")
            seeds.append(ClusterNode(host, int(port)))
        return redis.RedisCluster(startup_nodes=seeds, socket_timeout=5)
    return redis.Redis.from_url(url)


class LocalSentinel(_Nodes):
    """A primary, its replica and 3 sentinels watching them (master name ``committee``),
    on free loopback ports under ``data_dir``: ``redis+sentinel://`` for tests. With
    ``sentinels=0``, a replicated single node addressed as ``redis://`` (:attr:`primary`)."""

    MASTER = "committee"

    def __init__(self, data_dir: Path, *, sentinels: int = 3) -> None:
        self.data_dir = Path(data_dir)
        self.primary, self.replica, *self.sentinels = free_ports(2 + sentinels)
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.MASTER}"

    def start(self) -> LocalSentinel:
        binary = find_redis_server()
        try:
            for port, extra in (
                (self.primary, []),
                (self.replica, ["--replicaof", "127.0.0.1", str(self.primary)]),
            ):
                self._launch(binary, port, [*DATA, *extra])
            # the replica in sync before the sentinels start: their first look at the
            # primary then lists it (the next comes 10 s later)
            self._await(self._copied, "the replica's first copy")
            # a primary is down after 2 s unanswered: less on a loaded 2-core machine
            # fails over when nothing failed
            for port in self.sentinels:
                conf = self.data_dir / str(port) / "sentinel.conf"
                conf.parent.mkdir(parents=True, exist_ok=True)
                conf.write_text(
                    f"port {port}\nbind 127.0.0.1\nsentinel resolve-hostnames no\n"
                    f"sentinel monitor {self.MASTER} 127.0.0.1 {self.primary} 2\n"
                    f"sentinel down-after-milliseconds {self.MASTER} 2000\n"
                    f"sentinel failover-timeout {self.MASTER} 3000\n"
                )
                self._launch(binary, port, [], conf=conf)
            for port in self.sentinels:
                self._await(functools.partial(self._quickened, port), f"sentinel {port}")
            if self.sentinels:
                self._await(self._watched, "the sentinels' watch")
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self, binary: str, port: int, args: list[str], conf: Path | None = None) -> None:
        d = self.data_dir / str(port)
        d.mkdir(parents=True, exist_ok=True)
        command = [binary, str(conf), "--sentinel"] if conf else [binary, "--port", str(port)]
        command += ["--dir", str(d), *args] if conf is None else ["--dir", str(d)]
        if conf is None:
            command += ["--bind", "127.0.0.1"]
        with open(d / "redis.log", "ab") as log:
            self.processes[port] = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _quickened(self, port: int) -> bool:
        """Make the sentinel on ``port`` look at each node every second (Redis's default
        is 10 s: a former primary back on its port would wait that long to be made a
        replica) and greet the others twice a second. Redis before 7.0 has no such
        setting and keeps its own periods."""
        with contextlib.suppress(redis.ResponseError):
            self.client(port).execute_command(
                "SENTINEL", "DEBUG", "INFO-PERIOD", 1000, "PUBLISH-PERIOD", 500
            )
        return True

    def _watched(self) -> bool:
        for port in self.sentinels:
            m: Any = self.client(port).sentinel_master(self.MASTER)
            if int(m["num-slaves"]) < 1 or int(m["num-other-sentinels"]) < len(self.sentinels) - 1:
                return False
        return True

    def _copied(self) -> bool:
        """Whether the replica has its first copy: only then can a write be confirmed."""
        return bool(self.client(self.replica).info("replication")["master_link_status"] == "up")

    def primary_port(self) -> int:
        _host, port = self.client(self.sentinels[0]).execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.MASTER
        )
        return int(port)

    def kill(self, port: int) -> None:
        os.kill(self.processes[port].pid, signal.SIGKILL)

    def restart(self, port: int) -> None:
        """Start the Redis node on ``port`` again (after a kill), on its append-only file;
        the sentinels make a former primary the new primary's replica. Returns once the
        pair is whole again: whichever the sentinels name primary (on a loaded machine
        they may fail over again meanwhile), the other follows it, in sync."""
        self.processes.pop(port).wait()
        self._launch(find_redis_server(), port, DATA)

        def whole() -> bool:
            primary = self.primary_port()
            if primary not in (self.primary, self.replica):
                return False
            other = self.replica if primary == self.primary else self.primary
            info = self.client(other).info("replication")
            return bool(
                info["role"] == "slave"
                and int(info.get("master_port", 0)) == primary
                and info.get("master_link_status") == "up"
            )

        self._await(whole, f"node {port} back, and a replica following the primary")

    def wait_failover(self, old: int, timeout: float = 30.0) -> int:
        """The new primary's port once the sentinels name another and it says so."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError, OSError):
                port = self.primary_port()
                if port != old and self.client(port).execute_command("ROLE")[0] == b"master":
                    return port
            time.sleep(0.1)
        raise RuntimeError(f"no failover from {old} within {timeout:g} s")

    @property
    def ports(self) -> list[int]:
        return [self.primary, self.replica, *self.sentinels]

    def __enter__(self) -> LocalSentinel:
        return self.start()
