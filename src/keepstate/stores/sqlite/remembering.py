"""Idempotent writes on SQLite: the armed memo's answer stored in its write's own transaction.

``SqlitePlatform.remember`` arms a memo for the length of ``work``; ``SqliteFile.awrite`` hands the
first write it sees to ``applied``, which looks the key up, writes, and stores the answer from what
the write returned, all in that write's transaction (the writer thread runs one at a time, so a
repeat waits for it without a claim). A key already answered undoes the write (``Replay``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextvars import Token
from typing import TypeVar

from ...clock import now_ms
from ..remembered import ARMED, Answer, Armed, Memo, Remembered, Replay
from ..sql import remembered as sql

T = TypeVar("T")


def recall(conn: sqlite3.Connection, caller: str, key: str) -> Remembered | None:
    row = conn.execute(sql.RECALL, (caller, key)).fetchone()
    return None if row is None else Remembered(bytes(row[0]), Answer(int(row[1]), bytes(row[2])))


def keep(conn: sqlite3.Connection, caller: str, key: str, fingerprint: bytes, answer: Answer, now: int) -> None:
    conn.execute(sql.KEEP, (caller, key, fingerprint, answer.status, answer.body, now))


class Attempt:
    """One remembered write, sync or async alike: ``with Attempt(memo) as attempt:`` around the work arms
    the memo (``SqliteFile.write``/``awrite`` apply it to the work's write); after it, ``replayed`` is the
    answer the key already held, else ``unkept(result)`` the answer still to keep (the work wrote nothing)."""

    def __init__(self, memo: Memo) -> None:
        self.armed = Armed(memo)
        self.replayed: Remembered | None = None
        self._token: Token[Armed | None] | None = None

    def __enter__(self) -> Attempt:
        self._token = ARMED.set(self.armed)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: object) -> bool:
        assert self._token is not None
        ARMED.reset(self._token)
        if isinstance(error, Replay):
            self.replayed = error.remembered
            return True
        return False

    def unkept(self, result: object) -> Answer | None:
        return None if self.armed.used else self.armed.memo.render(result)


def with_answer(fn: Callable[[sqlite3.Connection], T]) -> Callable[[sqlite3.Connection], T]:
    """``fn``, with the armed memo's answer stored beside its write (``applied``) while one waits for
    its write; else ``fn`` itself (``SqliteFile.write``/``awrite`` pass every write here)."""
    armed = ARMED.get()
    return fn if armed is None or armed.used else applied(armed, fn, now_ms())


def applied(armed: Armed, fn: Callable[[sqlite3.Connection], T], now: int) -> Callable[[sqlite3.Connection], T]:
    """``fn`` with the memo's lookup before it and its answer stored after it, in one transaction."""
    memo = armed.memo

    def write(conn: sqlite3.Connection) -> T:
        found = recall(conn, memo.caller, memo.key)
        if found is not None:
            raise Replay(found)
        result = fn(conn)
        answer = memo.render(result)
        if answer is not None:
            keep(conn, memo.caller, memo.key, memo.fingerprint, answer, now)
            armed.used = True
        return result

    return write
