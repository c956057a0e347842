"""Lists read in part and store-side writes, each backend against itself or its raw driver.

What the state v2 API promises and this measures, per backend (each in its own function):
(a) the last 20 items of a ~1 MiB list built by appends cost what they cost of a 20-item list;
(b) SQLite: a chat turn (append one ~150 B message, read the last 20) on a fresh file against raw
    sqlite3 doing the same with one row per message, and its last 100 turns against its first 100;
(c) ``incr`` against a raw one-statement upsert-increment on the same driver, same durability.
Rounds alternate the two sides (``timing.paired``) so that drift hits both alike; the machine is
small and shared, so single figures are noisy: read the ratios.
"""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson

import keepstate

from .timing import paired, table

MESSAGE = {"role": "assistant", "content": "x" * 110, "n": 0}
"""About 150 bytes as JSON."""
LIST_BYTES = 1_000_000
TURNS = 1000
ROUNDS = 5


def _message(index: int) -> dict[str, object]:
    return {**MESSAGE, "n": index}


def _tail_rows(scope: keepstate.Scope) -> list[tuple[object, ...]]:
    """(a): tail 20 of a ~1 MiB list and of a 20-item list, both built by appends."""
    scope.append("short", [_message(n) for n in range(20)])
    count = 0
    while count * 160 < LIST_BYTES:
        scope.append("long", [_message(count + n) for n in range(100)])
        count += 100
    length = scope.items("long", 0, 1).length
    short, long, ratio = paired(lambda _: scope.tail("short", 20), lambda _: scope.tail("long", 20), 3000, rounds=9)
    return [("tail 20: ~1 MiB list vs 20-item list", f"{length:,} items", short, long, f"{1 / ratio:.2f}× cost")]


def _raw_sqlite(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def _raw_turn(conn: sqlite3.Connection) -> Callable[[int], None]:
    """One turn on raw sqlite3: a one-row insert, then the last 20 rows back (decoded, as ours are)."""
    conn.execute(
        "CREATE TABLE msgs (conv TEXT NOT NULL, seq INTEGER NOT NULL, body BLOB NOT NULL, PRIMARY KEY (conv, seq))"
    )

    def turn(index: int) -> None:
        conn.execute("INSERT INTO msgs (conv, seq, body) VALUES (?, ?, ?)", ("c", index, orjson.dumps(_message(index))))
        rows = conn.execute("SELECT body FROM msgs WHERE conv = ? ORDER BY seq DESC LIMIT 20", ("c",)).fetchall()
        [orjson.loads(body) for (body,) in reversed(rows)]

    return turn


def _store_turn(scope: keepstate.Scope) -> Callable[[int], None]:
    def turn(index: int) -> None:
        scope.append("history", [_message(index)])
        scope.tail("history", 20)

    return turn


def _chat_round(folder: Path, index: int) -> tuple[list[float], list[float]]:
    """Seconds of each turn of each side, on fresh files; the sides take turns (so that a slow
    moment of the shared disk hits both), the one going first changing every turn."""
    conn = _raw_sqlite(folder / f"raw-{index}.db")
    with keepstate.open(f"sqlite:///{folder / f'store-{index}.db'}") as store:
        sides = [_raw_turn(conn), _store_turn(store.scope("session", agent="bench", id="s"))]
        times: list[list[float]] = [[], []]
        for turn in range(TURNS):
            for side in (turn % 2, 1 - turn % 2):
                started = time.perf_counter()
                sides[side](turn)
                times[side].append(time.perf_counter() - started)
    conn.close()
    return times[0], times[1]


def _chat_rows(folder: Path) -> list[tuple[object, ...]]:
    """(b): medians over rounds of each side's total, of the ratio, and of ours late against early."""
    rounds = []
    for index in range(ROUNDS):
        raw, ours = _chat_round(folder, index)
        rounds.append((sum(raw), sum(ours), sum(ours[:100]) / sum(ours[-100:])))
    raw_rate = TURNS / statistics.median(r for r, _, _ in rounds)
    our_rate = TURNS / statistics.median(o for _, o, _ in rounds)
    ratio = statistics.median(r / o for r, o, _ in rounds)
    drift = statistics.median(d for _, _, d in rounds)
    return [
        (
            f"chat turn (append 1 + tail 20), {TURNS:,} turns on a fresh file",
            "turns/s",
            raw_rate,
            our_rate,
            f"{ratio:.2f}× raw",
        ),
        ("the same: last 100 turns vs first 100", "", "", "", f"{drift:.2f}× speed"),
    ]


def _incr_rows(folder: Path, scope: keepstate.Scope) -> list[tuple[object, ...]]:
    """(c): incr against one autocommit upsert-increment statement, both WAL + FULL."""
    conn = _raw_sqlite(folder / "raw-incr.db")
    conn.execute(
        "CREATE TABLE counters (ns TEXT NOT NULL, key TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (ns, key))"
    )
    upsert = (
        "INSERT INTO counters (ns, key, n) VALUES (?, ?, 1) ON CONFLICT (ns, key) DO UPDATE SET n = n + 1 RETURNING n"
    )
    raw, ours, ratio = paired(
        lambda i: conn.execute(upsert, ("ns", f"c{i % 10}")).fetchone(),
        lambda i: scope.incr(f"c{i % 10}"),
        1000,
        rounds=9,
    )
    conn.close()
    return [("incr vs raw upsert-increment", "ops/s", raw, ours, f"{ratio:.2f}× raw")]


def _sqlite_rows(folder: Path) -> list[tuple[object, ...]]:
    with keepstate.open(f"sqlite:///{folder / 'lists.db'}") as store:
        scope = store.scope("session", agent="bench", id="s")
        rows = _tail_rows(scope) + _incr_rows(folder, scope)
    return [("SQLite", *row) for row in rows[:1] + _chat_rows(folder) + rows[1:]]


def run() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        rows = _sqlite_rows(Path(tmp))
    return "\n\n".join(
        [
            "## Lists and store-side writes: SQLite",
            "Targets: (a) tail 20 of a ~1 MiB list ≤ 1.2× the cost of a 20-item list's; (b) SQLite chat turn "
            "≥ 0.75× raw sqlite3 (one row per message, WAL, `synchronous=FULL`), last 100 turns ≥ 0.9× the "
            "first 100; (c) incr ≥ 0.8× a raw one-statement upsert-increment. (a): the short list's side is "
            "'raw'. Medians of alternating rounds on a shared 2-core machine: noisy.",
            table(("backend", "case", "unit / size", "raw (or short)", "keepstate", "ratio"), rows),
        ]
    )
