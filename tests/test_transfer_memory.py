"""Memory documents move with export/import and backup: paths, versions, tombstones, metadata, text,
and a search index that works in the copy (SQLite FTS5 → PostgreSQL tsvector and back)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import keepstate
from keepstate.stores import open_database
from keepstate.stores.documents import DocumentRecord
from keepstate.transfer import VERSION

CLI = [sys.executable, "-m", "keepstate"]
RETURNS = "Returns policy\nItems may be returned within 30 days, with the receipt."
MENTION = "Shipping notes\nParcels leave on Mondays; a return label is in the box."


def _write_memory(url: str) -> None:
    """Two agents' memory: shared documents, two users' folders, a rewritten and a deleted one."""
    with keepstate.open(url) as store:
        shared = store.memory("support")
        shared.write("kb/returns", RETURNS, {"source": "wiki", "lang": "é"})
        shared.write("kb/shipping", MENTION)
        shared.write("kb/shipping", MENTION + "\nUpdated.")  # version 2
        shared.write("kb/old", "Obsolete returns page")
        shared.delete("kb/old")  # a tombstone at version 1
        store.memory("support", user="alice").write("users/{user}/prefs", "Prefers email. Returns by post.")
        store.memory("support", user="bob").write("users/{user}/prefs", "Prefers phone.")
        store.memory("billing").write("invoices/2026", "Invoice numbering restarts each year")


def _check_memory(url: str) -> None:
    """What ``_write_memory`` wrote, read back through memory's own rules on the store at ``url``."""
    with keepstate.open(url) as store:
        shared = store.memory("support")
        document = shared.read("kb/returns")
        assert document is not None and document.text == RETURNS
        assert document.metadata == {"source": "wiki", "lang": "é"} and document.version == 1
        shipping = shared.read("kb/shipping")
        assert shipping is not None and shipping.version == 2 and shipping.text.endswith("Updated.")
        assert shared.read("kb/old") is None
        assert shared.write("kb/old", "back") == 2, "a deleted path's version must not repeat after the move"
        hits = shared.search("returns")
        assert [hit.path for hit in hits] == ["kb/returns", "kb/shipping"], "the title match ranks first"
        assert "**" in hits[0].snippet
        assert [hit.path for hit in shared.search('"return label"')] == ["kb/shipping"]
        alice = store.memory("support", user="alice")
        assert [hit.path for hit in alice.search("prefers")] == ["users/alice/prefs"]
        assert [info.path for info in alice.list("users/")] == ["users/alice/prefs"]
        assert [hit.path for hit in store.memory("billing").search("invoice")] == ["invoices/2026"]


def _export(url: str, path: Path) -> list[bytes]:
    with path.open("wb") as out:
        subprocess.run([*CLI, "export", "--store", url], stdout=out, check=True, timeout=120)
    return path.read_bytes().splitlines()


def _import(url: str, path: Path) -> subprocess.CompletedProcess[bytes]:
    with path.open("rb") as dump:
        return subprocess.run([*CLI, "import", "--store", url], stdin=dump, capture_output=True, timeout=120)


def test_documents_round_trip_sqlite_postgres_sqlite(tmp_path: Path, pg_url: str) -> None:
    first, last = f"sqlite:///{tmp_path / 'first.db'}", f"sqlite:///{tmp_path / 'last.db'}"
    _write_memory(first)
    original = _export(first, tmp_path / "one.jsonl")
    documents = [orjson.loads(line) for line in original if b'"type":"document"' in line]
    assert {(d["space"], d["path"], d["version"], d["deleted"]) for d in documents} == {
        ("default/support", "kb/returns", 1, False),
        ("default/support", "kb/shipping", 2, False),
        ("default/support", "kb/old", 1, True),
        ("default/support", "users/alice/prefs", 1, False),
        ("default/support", "users/bob/prefs", 1, False),
        ("default/billing", "invoices/2026", 1, False),
    }
    assert orjson.loads(original[0])["version"] == VERSION >= 4  # the current format, documents in it since 4

    into_pg = _import(pg_url, tmp_path / "one.jsonl")
    assert into_pg.returncode == 0 and b"6 document" in into_pg.stderr, into_pg.stderr
    via_pg = _export(pg_url, tmp_path / "two.jsonl")
    assert _import(last, tmp_path / "two.jsonl").returncode == 0
    final = _export(last, tmp_path / "three.jsonl")
    assert sorted(original) == sorted(via_pg) == sorted(final)

    _check_memory(pg_url)
    _check_memory(last)


def test_a_bad_document_line_is_refused_with_its_line(tmp_path: Path) -> None:
    header = orjson.dumps({"type": "keepstate-export", "version": 3, "platform": True})
    line = orjson.dumps(
        {
            "type": "document",
            "space": "default/support",
            "path": "kb/../secret",
            "version": 1,
            "deleted": False,
            "text": "x",
            "metadata": {},
            "updated_at": 1,
        }
    )
    end = orjson.dumps({"type": "keepstate-export", "end": True, "records": 1})
    dump = tmp_path / "bad.jsonl"
    dump.write_bytes(b"\n".join([header, line, end]) + b"\n")
    done = _import(f"sqlite:///{tmp_path / 'x.db'}", dump)
    assert done.returncode != 0 and b"line 2" in done.stderr and b"Traceback" not in done.stderr
    assert not (tmp_path / "x.db").exists(), "nothing is written for a refused dump"


def test_documents_into_redis_are_refused(tmp_path: Path, redis_url: str) -> None:
    source = f"sqlite:///{tmp_path / 's.db'}"
    with keepstate.open(source) as store:
        store.memory("support").write("kb/a", "alpha")
    _export(source, tmp_path / "d.jsonl")
    done = _import(redis_url, tmp_path / "d.jsonl")
    assert done.returncode != 0 and b"memory documents have nowhere to go" in done.stderr


async def _copy_records(source: str, target: str) -> list[DocumentRecord]:
    """Every document record of ``source`` restored into ``target`` through the facets; the records."""
    from_db, to_db = open_database(source), open_database(target)
    try:
        records = [record async for record in (await from_db.documents()).records()]
        facet = await to_db.documents()
        for record in records:
            await facet.restore(record)
        assert [record async for record in facet.records()] == records
        return records
    finally:
        await from_db.aclose()
        await to_db.aclose()


def test_facets_copy_memory_to_sqlite_to_postgres(tmp_path: Path, pg_url: str) -> None:
    """The in-process store's records restore into SQLite, and SQLite's into PostgreSQL, unchanged."""
    source, sqlite_url = "memory://transfer-facets", f"sqlite:///{tmp_path / 'f.db'}"
    with keepstate.open(source):  # memory://name is one store for every opener while one holds it open
        _write_memory(source)
        records = asyncio.run(_copy_records(source, sqlite_url))
        assert len(records) == 6 and sum(record.deleted for record in records) == 1
    assert asyncio.run(_copy_records(sqlite_url, pg_url)) == records
    _check_memory(sqlite_url)
    _check_memory(pg_url)


def test_a_backup_copy_searches_like_the_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'live.db'}"
    _write_memory(url)
    copy = tmp_path / "copy.db"
    subprocess.run([*CLI, "backup", "--store", url, str(copy)], check=True, capture_output=True, timeout=120)
    _check_memory(f"sqlite:///{copy}")


@pytest.mark.parametrize("version", [1, 2, 3])
def test_older_dumps_without_documents_still_import(tmp_path: Path, version: int) -> None:
    lines = [
        orjson.dumps({"type": "keepstate-export", "version": version, "platform": False}),
        orjson.dumps(
            {"type": "state", "ns": "default/agent/chat/", "key": "k", "version": 1, "deleted": False, "value": 1}
        ),
    ]
    if version >= 2:
        lines.append(orjson.dumps({"type": "keepstate-export", "end": True, "records": 1}))
    dump = tmp_path / "old.jsonl"
    dump.write_bytes(b"\n".join(lines) + b"\n")
    assert _import(f"sqlite:///{tmp_path / 'o.db'}", dump).returncode == 0
