"""SQL text of idempotent writes' remembered answers (``stores/remembered.py``), for SQLite and
PostgreSQL alike (``?`` placeholders; ``postgres`` rewrites them). Schema step 9 of the platform.

One row per ``(caller, key)``. On PostgreSQL a write first claims its key (``CLAIM``: a row with no
status yet, visible to nobody until the write commits), so a repeat arriving meanwhile waits on that
row; SQLite writes one at a time and inserts the finished row (``KEEP``) in the write's transaction.
"""

from __future__ import annotations

_TABLE = """
CREATE TABLE ks_remembered (
    caller TEXT NOT NULL, key TEXT NOT NULL, fingerprint {blob} NOT NULL,
    status INTEGER, body {blob}, created_at {int} NOT NULL,
    PRIMARY KEY (caller, key)
);
CREATE INDEX ks_remembered_age ON ks_remembered (created_at);
"""
SQLITE_STEP = _TABLE.format(blob="BLOB", int="INTEGER")
PG_STEP = _TABLE.format(blob="BYTEA", int="BIGINT")

RECALL = "SELECT fingerprint, status, body FROM ks_remembered WHERE caller = ? AND key = ? AND status IS NOT NULL"
KEEP = (
    "INSERT INTO ks_remembered (caller, key, fingerprint, status, body, created_at) VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (caller, key) DO NOTHING"
)
CLAIM = (
    "INSERT INTO ks_remembered (caller, key, fingerprint, created_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (caller, key) DO NOTHING RETURNING 1"
)
SETTLE = "UPDATE ks_remembered SET status = ?, body = ? WHERE caller = ? AND key = ?"
COUNT_OLD = "SELECT count(*) FROM ks_remembered WHERE created_at < ?"
PURGE = (
    "DELETE FROM ks_remembered WHERE (caller, key) IN "
    "(SELECT caller, key FROM ks_remembered WHERE created_at < ? ORDER BY created_at LIMIT ?)"
)
