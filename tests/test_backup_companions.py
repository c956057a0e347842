"""``keepstate backup`` never writes over the store it copies: the database file, nor its companions.

A SQLite store is its file *and* its ``-wal`` (every write since the last checkpoint), ``-shm`` and
``-journal``. Replacing the live log loses every acknowledged write since the last checkpoint at the
next crash. Here a real ``keepstate serve`` keeps the store open (its log full of acknowledged writes),
a backup is aimed at each companion under every spelling of its path — refused in one line, nothing
touched — and after the server is killed every write is still in the store.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
from pathlib import Path

import httpx
import pytest

from backends import SAMPLE_URLS
from cliproc import assert_one_line_error, run_cli
from keepstate.stores import capabilities_of
from serverproc import running_server

WRITES = 40


def _spellings(tmp_path: Path) -> list[tuple[str, str]]:
    """(OUT argument, the companion it names) for relative, ``./``, absolute, ``..`` and linked spellings."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "log-link").symlink_to(tmp_path / "ks.db-wal")
    os.link(tmp_path / "ks.db-wal", tmp_path / "hard-wal")
    return [
        ("ks.db-wal", "-wal"),
        ("./ks.db-shm", "-shm"),
        ("ks.db-journal", "-journal"),
        (str(tmp_path / "ks.db-wal"), "-wal"),
        ("sub/../ks.db-shm", "-shm"),
        ("alias/ks.db-journal", "-journal"),
        ("alias/ks.db", ""),
        ("./ks.db", ""),
        ("log-link", "-wal"),
        ("hard-wal", "-wal"),
    ]


def _digests(tmp_path: Path) -> dict[str, str]:
    """The store's file and its log (the ``-shm`` index changes under any reader, as SQLite means it to)."""
    return {name: hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() for name in ("ks.db", "ks.db-wal")}


def test_a_backup_onto_the_store_or_a_companion_is_refused_and_every_write_survives_a_crash(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'ks.db'}"
    with running_server(store) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        admin = {"Authorization": f"Bearer {server.admin_key}"}
        for i in range(WRITES):
            made = http.post("/v0/keys", json={"role": "member", "name": f"k{i}"}, headers=admin)
            assert made.status_code == 201, made.text
        assert (tmp_path / "ks.db-wal").stat().st_size > 0  # the acknowledged writes are in the live log
        before = _digests(tmp_path)
        for out, companion in _spellings(tmp_path):
            done = run_cli("backup", "--store", store, out, "--force", cwd=tmp_path)
            line = assert_one_line_error(done, out, "choose another file")
            assert ("the store itself" in line) if not companion else (f"{companion[1:]} file" in line), line
            assert _digests(tmp_path) == before, out
            assert not (tmp_path / "ks.db-journal").exists()
        server.process.send_signal(signal.SIGKILL)
        server.process.wait()
    with sqlite3.connect(tmp_path / "ks.db") as conn:
        names = {row[0] for row in conn.execute("SELECT name FROM ks_keys WHERE name LIKE 'k%'")}
    conn.close()
    assert names == {f"k{i}" for i in range(WRITES)}


def test_a_backup_beside_the_store_still_works(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'ks.db'}"
    assert run_cli("keys", "create", "--role", "member", "--store", store).returncode == 0
    done = run_cli("backup", "--store", store, "ks.db-copy", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "integrity ok" in done.stdout


WITHOUT_FILE_BACKUP = [name for name, url in SAMPLE_URLS.items() if not capabilities_of(url).file_backup]


@pytest.mark.parametrize("backend", WITHOUT_FILE_BACKUP)
def test_a_store_without_a_file_backup_is_refused_by_its_declaration(tmp_path: Path, backend: str) -> None:
    url = SAMPLE_URLS[backend]
    declared = capabilities_of(url)
    assert not declared.file_backup and declared.own_backup
    done = run_cli("backup", "--store", url, "out.db", cwd=tmp_path)
    assert_one_line_error(done, declared.own_backup, "--store", status=2)
    assert list(tmp_path.iterdir()) == []
