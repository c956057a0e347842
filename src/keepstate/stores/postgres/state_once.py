"""A write of one statement and its idempotent answer in that statement (PostgreSQL): a state write, an emit.

``PostgresPlatform.remember`` runs a work that is one state write (``Memo.one_write``) through ``remember``
here, which arms its memo (``remembered.ARMED``); the write's first statement (``first``, from
``state_ops``) then goes as its twin: the same statement with the key's row inserted beside it, one round
trip and autocommitted like the plain write. The row keeps the write's raw result (status ``RAW``), which
the memo of a repeat renders (a repeat is the same request, so its memo renders it as the first would).

A repeat's insert meets the key's row: a unique violation undoes the whole statement, and the kept answer
is read (``Replay``). While the first write is still uncommitted the insert waits for it, ``lock_timeout``
bounding the wait (set in the statement just before the insert, so the write's own row lock waits as a
plain write does), then ``IdempotencyInFlight``. A statement whose guard did not pass wrote nothing:
``Locked`` sends the write to the transaction the other idempotent writes take, its key claimed first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg

from ...clock import now_ms
from ..remembered import ARMED, IN_FLIGHT_S, Armed, Memo, Remembered, Replay, in_flight
from . import state_sql as sql
from .remembering import RAW, recall, rendered

T = TypeVar("T")


class Locked(Exception):
    """The armed write is not one statement (its guard did not pass, or it has none): nothing was written."""


def twin(statement: str, raw: str, kept_if: str = "true") -> str:
    """``statement`` (one DML or SELECT, or ``WITH …`` ending in a SELECT on a line of its own; named
    parameters) keeping ``raw``, an expression of its result row ``w``, as the armed key's answer when
    ``kept_if`` (of ``w``) holds: a row it does not keep is a write that did not happen."""
    if statement.startswith("WITH "):
        ctes, _, final = statement.removeprefix("WITH ").rpartition("\nSELECT ")
        assert ctes and "\n" not in final, "a WITH statement's last line is its SELECT"
        ctes, final = f"{ctes}, ", f"SELECT {final}"
    else:
        ctes, final = "", statement
    wait = f"wait AS MATERIALIZED (SELECT set_config('lock_timeout', '{int(IN_FLIGHT_S * 1000)}', true))"
    kept = (
        "kept AS (INSERT INTO ks_remembered (caller, key, fingerprint, status, body, created_at) "
        f"SELECT %(once_caller)s, %(once_key)s, %(once_print)s, {RAW}, {raw}, %(once_at)s FROM w, wait "
        f"WHERE {kept_if})"
    )
    return f"WITH {ctes}w AS ({final}), {wait}, {kept} SELECT * FROM w"


_PUT = "convert_to('put:' || w.version, 'UTF8')"
_LIST = "convert_to('list:' || w.version || ',' || w.length, 'UTF8')"
_INCR = "convert_to('incr:', 'UTF8') || w.data || convert_to(',' || w.version, 'UTF8')"
TWINS = {
    sql.PUT_ANY: twin(sql.PUT_ANY, _PUT),
    sql.PUT_IF_ABSENT: twin(sql.PUT_IF_ABSENT, _PUT),
    sql.PUT_IF_VERSION: twin(sql.PUT_IF_VERSION, _PUT),
    sql.DELETE_VALUE: twin(sql.DELETE_VALUE, "convert_to('delete:', 'UTF8')"),
    sql.APPEND: twin(sql.APPEND, _LIST),
    sql.TRIM: twin(sql.TRIM, _LIST),
    sql.POP: twin(sql.POP, "convert_to('pop:' || w.version || ',' || w.length || ',', 'UTF8') || w.item"),
    sql.INCR_ANY: twin(sql.INCR_ANY, _INCR),
    sql.INCR_IF_ABSENT: twin(sql.INCR_IF_ABSENT, _INCR),
    sql.INCR_IF_VERSION: twin(sql.INCR_IF_VERSION, _INCR),
}
"""Each one-statement write's twin, by the statement's text."""


async def remember(memo: Memo, work: Callable[[], Awaitable[T]]) -> T | Remembered:
    """``work`` (one write of one statement: a state write, an emit) with ``memo`` armed: its answer kept by
    its own statement, or the key's answer; ``Locked`` when the write must go the claimed way instead
    (nothing written)."""
    armed = Armed(memo)
    token = ARMED.set(armed)
    try:
        result = await work()
    except Replay as replay:
        return rendered(memo, replay.remembered)
    finally:
        ARMED.reset(token)
    assert armed.used, "a one-write work sent its statement through first()"
    return result


async def first(
    conn: psycopg.AsyncConnection[Any], query: str, params: dict[str, Any], twin_of_query: str | None = None
) -> tuple[Any, ...] | None:
    """A write's first statement: as it is, or, while a memo is armed, its twin keeping the answer (one of
    ``TWINS``, else ``twin_of_query``; ``Replay`` when the key holds one; ``Locked`` when no row came)."""
    armed = ARMED.get()
    if armed is None or armed.used:
        plain: tuple[Any, ...] | None = await (await conn.execute(query, params)).fetchone()
        return plain
    armed.used = True
    memo = armed.memo
    once = {"once_caller": memo.caller, "once_key": memo.key, "once_print": memo.fingerprint, "once_at": now_ms()}
    try:
        row = await (await conn.execute(twin_of_query or TWINS[query], {**params, **once})).fetchone()
    except psycopg.errors.UniqueViolation as error:
        if error.diag.table_name != "ks_remembered":
            raise
        found = await recall(conn, memo.caller, memo.key)
        raise Locked() if found is None else Replay(found) from None  # None: purged since; claim it anew
    except psycopg.errors.LockNotAvailable:
        raise in_flight(memo.key) from None
    if row is None:
        raise Locked()
    kept: tuple[Any, ...] = row
    return kept


def unarmed() -> None:
    """Before a write's locked path: an armed memo still unused means the write cannot be one statement."""
    armed = ARMED.get()
    if armed is not None and not armed.used:
        raise Locked()
