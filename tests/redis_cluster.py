"""A local Redis Cluster for the tests: ``redis-server --cluster-enabled yes`` processes on free ports,
joined by ``redis-cli --cluster create``, stopped and removed afterwards.

Each pytest process makes its own (on free ports, in its own temp folder), so parallel test workers
never share or tear down another's cluster. A test that stops a node (SIGSTOP) or moves slots makes a
private one. ``cluster-require-full-coverage no``: the masters that answer keep serving their slots
while another is down, as a deployment that wants that behaviour configures it (docs/deploy.md).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import BinaryIO

import pytest
import redis

from serverproc import free_port

REQUIRE_SERVICES = os.environ.get("KEEPSTATE_REQUIRE_SERVICES") == "1"

START_TIMEOUT_S = 60.0
NODE_TIMEOUT_MS = 5000


class LocalCluster:
    """``masters`` masters with ``replicas`` replicas each, in a temp folder; ``start()``, ``destroy()``."""

    def __init__(self, masters: int = 3, replicas: int = 0) -> None:
        self.size = masters * (1 + replicas)
        self.replicas = replicas
        self.root = Path(tempfile.mkdtemp(prefix="keepstate-cluster-"))
        self.ports: list[int] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[BinaryIO] = []

    def url(self, prefix: str = "keepstate:") -> str:
        """A store URL naming two of the nodes as seeds (the others are discovered)."""
        seeds = ",".join(f"127.0.0.1:{port}" for port in self.ports[:2])
        return f"redis+cluster://{seeds}/?prefix={prefix}"

    def start(self) -> None:
        for index in range(self.size):
            self._spawn(index)
        for port in self.ports:
            self._wait_answering(port)
        nodes = [f"127.0.0.1:{port}" for port in self.ports]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *nodes, "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=START_TIMEOUT_S,
        )
        self.wait_healthy()

    def _spawn(self, index: int) -> None:
        port, bus = free_port(), free_port()
        folder = self.root / str(index)
        folder.mkdir()
        args = ["--port", str(port), "--cluster-port", str(bus), "--bind", "127.0.0.1", "--dir", str(folder)]
        args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--save", "", "--appendonly", "no"]
        args += ["--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--cluster-require-full-coverage", "no"]
        log = open(folder / "log", "wb")  # noqa: SIM115 - the process writes to it until destroy() closes it
        self._logs.append(log)
        self.procs.append(subprocess.Popen(["redis-server", *args], stdout=log, stderr=subprocess.STDOUT))
        self.ports.append(port)

    def _wait_answering(self, port: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with redis.Redis(port=port, socket_timeout=1) as client:
                    client.ping()
                    return
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {port} did not answer")

    def _check_alive(self) -> None:
        for index, proc in enumerate(self.procs):
            if proc.poll() is not None:
                log = (self.root / str(index) / "log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server {index} exited with {proc.returncode}:\n{log}")

    def wait_healthy(self) -> None:
        """Until every node says the cluster is ok and knows every other node (gossip has converged)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(self._healthy(port) for port in self.ports):
            self._check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError("the local Redis Cluster did not become healthy")
            time.sleep(0.1)

    def _healthy(self, port: int) -> bool:
        try:
            with redis.Redis(port=port, socket_timeout=2) as client:
                info = client.execute_command("CLUSTER", "INFO").decode()
                nodes = client.execute_command("CLUSTER", "NODES").decode()
                replication = client.info("replication")
        except redis.exceptions.RedisError:
            return False
        ok = "cluster_state:ok" in info and f"cluster_known_nodes:{self.size}" in info
        ok = ok and "fail" not in nodes and "handshake" not in nodes
        return ok and (replication["role"] == "master" or replication.get("master_link_status") == "up")

    def node_of_slot(self, slot: int) -> int:
        """The index (into ``ports``) of the master serving ``slot``."""
        with redis.Redis(port=self.ports[0], socket_timeout=2) as client:
            for start, end, master, *_ in client.execute_command("CLUSTER SLOTS"):
                if start <= slot <= end:
                    return self.ports.index(int(master[1]))
        raise LookupError(slot)

    def masters(self) -> list[int]:
        """The indexes of the nodes that are masters now."""
        with redis.Redis(port=self.ports[0], socket_timeout=2) as client:
            return sorted({self.ports.index(int(entry[2][1])) for entry in client.execute_command("CLUSTER SLOTS")})

    def node_id(self, index: int) -> str:
        with redis.Redis(port=self.ports[index], socket_timeout=5) as client:
            return str(client.execute_command("CLUSTER", "MYID").decode())

    def begin_move(self, slot: int, source: int, target: int) -> None:
        """Mark ``slot`` migrating from ``source`` to ``target`` (``redis-cli --cluster reshard``'s first
        steps): ``source`` answers ASK for keys it no longer has, ``move_keys`` moves them."""
        with redis.Redis(port=self.ports[target], socket_timeout=5) as client:
            client.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(source))
        with redis.Redis(port=self.ports[source], socket_timeout=5) as client:
            client.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_id(target))

    def move_keys(self, slot: int, source: int, target: int, only: list[str] | None = None) -> None:
        """Move ``only`` these keys of ``slot`` (default: all) from ``source`` to ``target`` (MIGRATE)."""
        with redis.Redis(port=self.ports[source], socket_timeout=5) as client:
            while keys := only or client.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
                client.execute_command("MIGRATE", "127.0.0.1", self.ports[target], "", 0, 5000, "KEYS", *keys)
                if only:
                    return

    def end_move(self, slot: int, target: int) -> None:
        """Give ``slot`` to ``target`` on every master: the others now answer MOVED."""
        owner = self.node_id(target)
        for index in [target, *(i for i in self.masters() if i != target)]:
            with redis.Redis(port=self.ports[index], socket_timeout=5) as client:
                client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", owner)

    def replica_of(self, index: int) -> int:
        """The index of a replica of master ``index``."""
        with redis.Redis(port=self.ports[index], socket_timeout=5) as client:
            return self.ports.index(int(client.info("replication")["slave0"]["port"]))

    def fail_over(self, replica: int) -> None:
        """A manual failover (``CLUSTER FAILOVER``): the replica catches up with its master, then takes
        its slots; returns when every node agrees."""
        with redis.Redis(port=self.ports[replica], socket_timeout=5) as client:
            client.execute_command("CLUSTER", "FAILOVER")
        deadline = time.monotonic() + START_TIMEOUT_S
        while replica not in self.masters():
            if time.monotonic() > deadline:
                raise RuntimeError("the manual failover did not complete")
            time.sleep(0.05)
        self.wait_healthy()

    def pause(self, index: int) -> None:
        self.procs[index].send_signal(signal.SIGSTOP)

    def resume(self, index: int) -> None:
        self.procs[index].send_signal(signal.SIGCONT)

    def delete_prefix(self, prefix: str) -> None:
        """Delete every key starting with ``prefix`` on every node that answers."""
        for port in self.ports:
            try:
                with redis.Redis(port=port, socket_timeout=5) as client:
                    if client.info("replication")["role"] != "master":
                        continue
                    for name in client.scan_iter(match=_glob(prefix) + "*", count=1000):
                        client.delete(name)
            except redis.exceptions.RedisError:
                continue

    def destroy(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
        for proc in self.procs:
            proc.wait(30)
        for log in self._logs:
            log.close()
        shutil.rmtree(self.root, ignore_errors=True)


def _glob(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def start_cluster(masters: int = 3, replicas: int = 0) -> LocalCluster:
    """A started local cluster (a second try on new ports if another process took one meanwhile); skip
    (or fail, under KEEPSTATE_REQUIRE_SERVICES=1) when redis-server or redis-cli is not installed."""
    missing = [tool for tool in ("redis-server", "redis-cli") if shutil.which(tool) is None]
    if missing:
        reason = f"{' and '.join(missing)} not installed: cannot start a local Redis Cluster"
        if REQUIRE_SERVICES:
            pytest.fail(f"{reason} and KEEPSTATE_REQUIRE_SERVICES=1")
        pytest.skip(reason)
    for attempt in range(2):
        cluster = LocalCluster(masters, replicas)
        try:
            cluster.start()
            return cluster
        except (RuntimeError, OSError, subprocess.SubprocessError):
            cluster.destroy()
            if attempt:
                raise
    raise AssertionError("unreachable")


_SHARED: list[LocalCluster] = []


def shared_cluster() -> LocalCluster:
    """This process's local cluster for every test that needs a fresh prefix on one: started on first
    use (a pytest worker process starts its own, on free ports), removed when the process exits."""
    if not _SHARED:
        cluster = start_cluster()
        _SHARED.append(cluster)
        atexit.register(cluster.destroy)
    return _SHARED[0]
