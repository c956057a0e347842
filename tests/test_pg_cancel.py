"""A task cancelled while it waits for a pooled PostgreSQL connection is cancelled, at every moment.

psycopg_pool waits with ``asyncio.wait_for``, which on Python 3.11 loses a cancellation that lands
in the loop step its connection arrives (CPython gh-86296): the task went on as if never cancelled
(a lease renewer cancelled so renewed forever; the server's sweeper would never stop). The waiter
is cancelled at each of a range of loop-step offsets after the connection is handed back, so one
of them lands in that window.
"""

from __future__ import annotations

import asyncio
import socket
import threading

import psycopg_pool

from keepstate.stores.postgres.db import _AsyncPool, aconnection, open_async_pool

OFFSETS = range(12)
HANG_S = 60
"""Bounds a wait for something that must happen, so a broken pool fails instead of hanging."""


async def _cancel_waiter_after(pool: psycopg_pool.AsyncConnectionPool, steps: int) -> tuple[bool, bool]:
    """(cancel() took effect, the waiter ended cancelled) for a cancel ``steps`` loop steps after the hand-back."""
    holding, release = asyncio.Event(), asyncio.Event()

    async def holder() -> None:
        async with aconnection(pool) as conn:
            holding.set()
            await release.wait()
            await conn.execute("SELECT 1")

    async def waiter() -> None:
        async with aconnection(pool) as conn:
            await conn.execute("SELECT 1")

    first = asyncio.create_task(holder())
    await holding.wait()
    second = asyncio.create_task(waiter())
    give_up = asyncio.get_running_loop().time() + HANG_S
    while pool.get_stats().get("requests_waiting", 0) < 1:  # until queued for the one connection
        assert asyncio.get_running_loop().time() < give_up, "the waiter never queued for the connection"
        await asyncio.sleep(0.001)
    release.set()
    await first
    for _ in range(steps):
        await asyncio.sleep(0)
    took = second.cancel()
    await asyncio.wait([second], timeout=HANG_S)
    return took, second.done() and second.cancelled()


async def test_cancel_while_waiting_for_a_connection_is_never_lost(pg_url: str) -> None:
    pool = await open_async_pool(pg_url, max_size=1)
    try:
        outcomes = [await _cancel_waiter_after(pool, steps) for steps in OFFSETS]
    finally:
        await pool.close()
    lost = [steps for steps, (took, cancelled) in zip(OFFSETS, outcomes, strict=True) if took and not cancelled]
    assert lost == [], f"cancellations lost at loop-step offsets {lost}"
    assert any(took for took, _ in outcomes)  # some cancels landed while the waiter still waited


def test_a_loop_ending_while_its_pool_opens_a_connection_ends() -> None:
    """``asyncio.run`` cancels every task left when its coroutine returns; a pool worker then inside a
    connection attempt (here to a server that accepts and never answers) must end with the rest."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        accepted: list[socket.socket] = []

        async def main() -> None:
            pool = _AsyncPool(f"postgresql://keepstate@127.0.0.1:{port}/test", min_size=1, open=False)
            await pool.open(wait=False)
            connection, _ = await asyncio.to_thread(silent.accept)  # the worker is inside its connect
            accepted.append(connection)

        ending = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
        ending.start()
        ending.join(HANG_S)
        for connection in accepted:
            connection.close()
        assert accepted and not ending.is_alive(), "the loop never ended: a pool worker kept waiting"
