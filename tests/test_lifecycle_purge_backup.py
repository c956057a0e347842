"""Purge and backup while real ``keepstate serve`` processes keep serving the same store.

- ``keepstate purge`` (a separate process) beside two servers on one PostgreSQL schema and on one
  SQLite file, while threads start, claim and complete runs and read state through both: exactly the
  finished runs older than the cutoff go, with their invocations; queued, running and held runs of
  the same age, younger runs, the traffic's runs and every state value stay; no request fails.
- ``serve --retention-days`` purges the same way by itself.
- ``keepstate backup`` of a SQLite file that two servers keep writing: the copy opens, passes its
  check, and holds every write acknowledged before the backup began.

Old runs are written as rows through the platform facet's ``load`` (the import path), with their
``updated_at`` in the past: nothing waits days, and no test edits the tables by hand.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Self

import httpx

import keepstate
from cliproc import run_cli, start_cli
from keepstate.clock import now_ms
from keepstate.platform import open_platform
from lifecycle_support import SHARED, Pair, bearer, new_key, serve_pair

DAY_MS = 86_400_000
OLD = now_ms() - 10 * DAY_MS
FINISHED = ("done", "failed", "interrupted", "cancelled", "expired")
KEPT = ("queued", "running", "held")


# ---------------------------------------------------------------- old rows


def run_row(run_id: str, status: str, updated_at: int) -> dict[str, Any]:
    return {
        "id": run_id,
        "env": "default",
        "agent": f"old-{status}",
        "owner": "k-old",
        "caller": "k-old",
        "session_id": None,
        "end_user": None,
        "parent_id": None,
        "status": status,
        "input": b"{}",
        "output": b"null",
        "error": b"null",
        "hold": b"null",
        "decision": b"null",
        "cancel_requested": 0,
        "idempotency_key": None,
        "created_at": updated_at,
        "updated_at": updated_at,
        "queue_timeout": 600_000,
        "queue_deadline": now_ms() + DAY_MS if status == "queued" else None,
    }


def invocation_row(run_id: str, status: str) -> dict[str, Any]:
    inv_status = "lost" if status == "interrupted" else status  # an invocation ends as its run does
    return {
        "id": f"inv-{run_id}",
        "env": "default",
        "run_id": run_id,
        "agent": f"old-{status}",
        "kind": "start",
        "status": inv_status,
        "token_hash": None,
        "lease_until": now_ms() + DAY_MS if status == "running" else 0,
        "created_at": OLD,
        "queue_deadline": None,
    }


async def load_runs(store: str, statuses: dict[str, int], updated_at: int) -> dict[str, set[str]]:
    """``statuses[s]`` runs in status ``s``, each with an invocation, last updated at ``updated_at``."""
    ids = {status: {f"run_{status}_{secrets.token_hex(6)}" for _ in range(count)} for status, count in statuses.items()}
    platform = await open_platform(store)
    try:
        runs = [run_row(run_id, status, updated_at) for status, found in ids.items() for run_id in found]
        invocations = [invocation_row(row["id"], row["status"]) for row in runs]
        for start in range(0, len(runs), 500):
            assert await platform.repo.load("ks_runs", runs[start : start + 500]) == len(runs[start : start + 500])
            await platform.repo.load("ks_invocations", invocations[start : start + 500])
    finally:
        await platform.aclose()
    return ids


async def stored_run_ids(store: str, table: str = "ks_runs", column: str = "id") -> set[str]:
    platform = await open_platform(store)
    try:
        return {row[column] for row in await platform.repo.dump(table)}
    finally:
        await platform.aclose()


# ---------------------------------------------------------------- traffic


class Threads:
    """``count`` threads running ``self.loop(index)`` from ``with`` until its end."""

    def __init__(self, count: int) -> None:
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self.loop, args=(i,)) for i in range(count)]

    def loop(self, index: int) -> None:
        raise NotImplementedError

    def running(self) -> bool:
        return not self._stop.is_set()

    def __enter__(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


class Traffic(Threads):
    """Threads starting, claiming and completing runs, and reading state, through both servers until
    stopped; every answer's status is counted."""

    def __init__(self, pair: Pair) -> None:
        self.pair = pair
        self.member, self.worker = new_key(pair[0], "member"), new_key(pair[1], "worker")
        self.statuses: Counter[int] = Counter()
        self.run_ids: set[str] = set()
        self._lock = threading.Lock()
        super().__init__(3)

    def _count(self, answer: httpx.Response) -> httpx.Response:
        with self._lock:
            self.statuses[answer.status_code] += 1
        return answer

    def loop(self, index: int) -> None:
        here, there = (
            httpx.Client(base_url=server.url, timeout=30) for server in (self.pair[index % 2], self.pair[1 - index % 2])
        )
        with here, there:
            while self.running():
                run = self._count(here.post("/v0/runs", json={"agent": f"live{index}"}, headers=self.member))
                if run.status_code != 202:
                    continue
                inv = self._count(
                    there.post(
                        "/v0/invocations/claim", json={"agents": [f"live{index}"], "wait": 1}, headers=self.worker
                    )
                )
                if inv.status_code != 200:
                    continue
                token = {"x-agentos-run-token": inv.json()["token"]}
                self._count(here.put("/v0/state/agent/seen", json={"value": index}, headers=token))
                self._count(there.get("/v0/state/agent/seen", headers=token))
                self._count(here.post(f"/v0/invocations/{inv.json()['id']}/complete", json={}, headers=token))
                with self._lock:
                    self.run_ids.add(run.json()["id"])


# ---------------------------------------------------------------- purge


@SHARED
def test_purge_removes_only_old_finished_runs_while_two_servers_serve(backend_url: str) -> None:
    old = asyncio.run(
        load_runs(
            backend_url,
            {
                "done": 1500,
                "failed": 300,
                "interrupted": 100,
                "cancelled": 100,
                "expired": 300,
                "queued": 20,
                "running": 5,
                "held": 20,
            },
            OLD,
        )
    )
    young = asyncio.run(load_runs(backend_url, {"done": 50, "expired": 10}, now_ms() - DAY_MS))
    with keepstate.open(backend_url) as store:
        kept_state = store.scope("run", agent="old-done", id=sorted(old["done"])[0])
        kept_state.put("notes", {"kept": True})
    doomed = set().union(*(old[status] for status in FINISHED))
    dry = run_cli("purge", "--store", backend_url, "--older-than", "5", "--dry-run")
    assert dry.returncode == 0 and dry.stdout.startswith(f"would purge {len(doomed)} "), dry.stderr
    with serve_pair(backend_url, lease=600) as pair:
        with Traffic(pair) as traffic:
            time.sleep(1)
            done = run_cli("purge", "--store", backend_url, "--older-than", "5", timeout=120)
            time.sleep(0.5)
        assert done.returncode == 0 and done.stdout.startswith(f"purged {len(doomed)} "), (done.stdout, done.stderr)
        assert set(traffic.statuses) <= {200, 202, 204}, traffic.statuses
        assert traffic.statuses[202] > 10  # the servers kept serving while it purged
        remaining = asyncio.run(stored_run_ids(backend_url))
        assert not remaining & doomed
        assert remaining >= set().union(*(old[status] for status in KEPT), *young.values(), traffic.run_ids)
        invocations = asyncio.run(stored_run_ids(backend_url, "ks_invocations", "run_id"))
        assert not invocations & doomed and invocations >= set().union(*(old[status] for status in KEPT))
    with keepstate.open(backend_url) as store:
        assert store.scope("run", agent="old-done", id=sorted(old["done"])[0]).get("notes") == {"kept": True}
    again = run_cli("purge", "--store", backend_url, "--older-than", "5")
    assert again.returncode == 0 and again.stdout.startswith("purged 0 "), again.stderr


@SHARED
def test_serve_with_a_retention_purges_old_finished_runs_by_itself(backend_url: str) -> None:
    old = asyncio.run(load_runs(backend_url, {"done": 1200, "cancelled": 10, "queued": 5, "held": 5}, OLD))
    with serve_pair(backend_url, "--retention-days", "5", lease=600) as pair:
        give_up = time.monotonic() + 300  # a hang guard only: the loop ends when they are gone
        while time.monotonic() < give_up:
            remaining = asyncio.run(stored_run_ids(backend_url))
            if not remaining & (old["done"] | old["cancelled"]):
                break
            time.sleep(0.5)
        assert remaining == old["queued"] | old["held"]
        # A server counts a purge round when its last batch is done: the other server may still be pausing
        # after a batch whose runs are already gone, so the counts are read until they add up.
        while (purged := _purged_by(pair)) < 1210 and time.monotonic() < give_up:
            time.sleep(0.5)
        assert purged == 1210  # every run purged once, by one server or the other


def _purged_by(servers: Pair) -> float:
    """The finished runs the servers' sweeps purged, from their metrics."""
    metrics = "\n".join(httpx.get(f"{server.url}/metrics").text for server in servers)
    return sum(
        float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("keepstate_sweep_purged_total")
    )


# ---------------------------------------------------------------- backup


class Writers(Threads):
    """Threads each writing 1, 2, 3 … to its own key through alternating servers, remembering the last
    number acknowledged, and when."""

    def __init__(self, pair: Pair, count: int = 4) -> None:
        admin = bearer(pair[0].admin_key)
        self.urls = [server.url for server in pair]
        self.tokens: list[str] = []
        for index in range(count):
            httpx.post(f"{self.urls[0]}/v0/runs", json={"agent": f"writer{index}"}, headers=admin)
            claimed = httpx.post(
                f"{self.urls[1]}/v0/invocations/claim", json={"agents": [f"writer{index}"], "wait": 5}, headers=admin
            )
            assert claimed.status_code == 200, claimed.text
            self.tokens.append(claimed.json()["token"])
        self.acked = [0] * count
        self.acked_at: list[list[float]] = [[] for _ in range(count)]
        super().__init__(count)

    def loop(self, index: int) -> None:
        clients = [httpx.Client(base_url=url, timeout=30) for url in self.urls]
        headers = {"x-agentos-run-token": self.tokens[index]}
        try:
            while self.running():
                value = self.acked[index] + 1
                answer = clients[value % 2].put("/v0/state/agent/counter", json={"value": value}, headers=headers)
                assert answer.status_code == 200, answer.text
                self.acked[index] = value
                self.acked_at[index].append(time.monotonic())
        finally:
            for client in clients:
                client.close()


def test_a_backup_under_write_load_opens_and_holds_every_acknowledged_write(tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path / 'live.db'}"
    with keepstate.open(source) as store:  # some bulk, so the copy takes a while
        bulk = store.scope("agent", agent="bulk")
        for n in range(120):
            bulk.put(f"blob{n}", "x" * 200_000)
    with serve_pair(source, lease=600) as pair:
        with Writers(pair) as writers:
            time.sleep(1.0)
            before = list(writers.acked)  # each acknowledged before the backup process even starts
            began = time.monotonic()
            process = start_cli("backup", "--store", source, str(tmp_path / "copy.db"), stdout=-1, stderr=-1)
            out, err = process.communicate(timeout=120)
            ended = time.monotonic()
            time.sleep(0.3)
        assert process.returncode == 0, err
        assert "integrity ok" in out
        during = sum(1 for stamps in writers.acked_at for at in stamps if began <= at <= ended)
        assert during > 0  # the servers were writing while it copied
    with keepstate.open(f"sqlite:///{tmp_path / 'copy.db'}") as copy:
        for index, acknowledged in enumerate(before):
            value = copy.scope("agent", agent=f"writer{index}").get("counter")
            assert value is not None and acknowledged <= value <= writers.acked[index]
        assert copy.scope("agent", agent="bulk").get("blob119") == "x" * 200_000
    assert not [path for path in tmp_path.iterdir() if ".partial-" in path.name]
    assert not (tmp_path / "copy.db-wal").exists()  # one self-contained file
