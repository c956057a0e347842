"""Benchmark: what a console page costs the server at 1,000 sessions and 10,000 runs.

The whole app (``create_app``, the one ``keepstate serve`` runs) in this process, driven through
httpx's ASGI transport, so each figure is server time for one page: cookie check (two store reads),
the page's store reads, rendering. No network and no browser. The store is filled through the
platform's own calls (``tests/console/console_support.seed``): 1,000 sessions of 50 end users,
10,000 runs (one turn per session, 9,000 more over ten agents, 200 held), and one session whose
agent keeps a 500-message conversation; then, signed in as an admin, the memory pages over
``DOCUMENTS`` documents of ~2 KB in agent ``chat``'s memory (shared ones and a folder for each of the
50 users, the conversation's user included). Each page is asked for in alternating rounds with
``/healthz`` through the same stack (the floor of a request), on SQLite and on memory; the ratios
matter more than the milliseconds (a 2-core machine shared with other work).
``python -m bench console`` runs it alone.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "console"))
from console_support import Seeded, in_process, seed, sign_in

from keepstate.memory_rules import View, space_of
from keepstate.platform.memory import MemoryApi
from keepstate.platform.service import Platform

from .timing import table

SESSIONS, RUNS, MESSAGES = 1000, 10_000, 500
DOCUMENTS = 5000
ROUNDS = 7
PER_ROUND = 5


def pages(seeded: Seeded) -> list[tuple[str, str]]:
    """The pages measured: (what, path)."""
    return [
        ("Sessions, first page", "/console/sessions"),
        ("Sessions of one user", "/console/sessions?user=user-7"),
        ("Runs, first page", "/console/runs"),
        ("Runs, held only", "/console/runs?status=held"),
        ("Runs of one agent, queued", "/console/runs?agent=agent-7&status=queued"),
        ("Run (held, with run state)", f"/console/runs/{seeded.held[0]}"),
        ("Session, 500-message conversation", f"/console/sessions/{seeded.conversation}"),
        ("Agents", "/console/agents"),
        ("Waiting for you (200 held)", "/console/waiting"),
        ("Status poll, 50 runs", "/console/runs/status?ids=" + ",".join(seeded.runs[-50:])),
    ]


def memory_pages(seeded: Seeded) -> list[tuple[str, str]]:
    """The memory pages measured, as an admin: (what, path)."""
    return [
        ("Memory, first page of documents", "/console/agents/chat/memory"),
        ("Memory of one user's folder", "/console/agents/chat/memory?prefix=users/user-7/"),
        ("Memory search (two words, 20 best)", "/console/agents/chat/memory?q=invoice+refund"),
        ("Memory document (~2 KB)", f"/console/agents/chat/memory/kb/doc-{DOCUMENTS // 2 + 1:05d}"),
        ("Session with its user's folder (admin)", f"/console/sessions/{seeded.conversation}"),
    ]


WORDS = (
    "invoice",
    "refund",
    "parcel",
    "order",
    "shipping",
    "label",
    "account",
    "password",
    "email",
    "phone",
    "warranty",
    "return",
    "delivery",
    "address",
    "payment",
    "card",
    "discount",
    "coupon",
    "kettle",
    "lamp",
    "chair",
    "table",
)


def _text(n: int) -> str:
    """~2 KB of text whose words vary with ``n``, so a search matches some documents, not all."""
    words = [WORDS[(n * 7 + i * (n % 5 + 1)) % len(WORDS)] for i in range(300)]
    return f"Note {n} about {WORDS[n % len(WORDS)]}\n" + " ".join(words)


async def _fill_memory(platform: Platform, count: int) -> None:
    """``count`` documents in agent ``chat``'s memory: nine in ten shared (``kb/``), the rest in the
    50 users' folders, written through ``MemoryApi`` in batches."""
    api = MemoryApi(await platform.database.documents())
    view = View(space_of("default", "chat"), every_folder=True)
    paths = [f"kb/doc-{n:05d}" if n % 10 else f"users/user-{n % 50}/note-{n:05d}" for n in range(count)]
    for start in range(0, count, 200):
        await asyncio.gather(
            *(
                api.write(view, path, {"text": _text(start + i), "metadata": {"n": start + i}})
                for i, path in enumerate(paths[start : start + 200])
            )
        )


async def _timed(client: httpx.AsyncClient, path: str) -> float:
    started = time.perf_counter()
    answer = await client.get(path)
    elapsed = time.perf_counter() - started
    assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
    return elapsed


async def _measure(client: httpx.AsyncClient, path: str) -> tuple[float, float]:
    """Median ms of the page and of ``/healthz``, asked for in alternating rounds."""
    page: list[float] = []
    floor: list[float] = []
    for _ in range(ROUNDS):
        page += [await _timed(client, path) for _ in range(PER_ROUND)]
        floor += [await _timed(client, "/healthz") for _ in range(PER_ROUND)]
    return statistics.median(page) * 1000, statistics.median(floor) * 1000


async def _backend(url: str) -> tuple[list[tuple[object, ...]], float]:
    async with in_process(url) as (client, platform):
        started = time.perf_counter()
        seeded = await seed(platform, SESSIONS, RUNS, MESSAGES)
        filled = time.perf_counter() - started
        await sign_in(client, seeded.member)
        measured = [await _row(client, name, path) for name, path in pages(seeded)]
        await _fill_memory(platform, DOCUMENTS)
        client.cookies.clear()  # signed out: sign in again, as the admin
        await sign_in(client, seeded.admin)
        measured += [await _row(client, name, path) for name, path in memory_pages(seeded)]
        return measured, filled


async def _row(client: httpx.AsyncClient, name: str, path: str) -> tuple[object, ...]:
    await _timed(client, path)  # warm: templates compiled, caches filled
    ms, floor = await _measure(client, path)
    return name, f"{ms:.2f}", f"{floor:.2f}", f"{ms / floor:.0f}x"


async def _all() -> str:
    sections = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, url in (
            ("SQLite", f"sqlite:///{Path(tmp) / 'console.db'}"),
            ("memory", f"memory://{uuid.uuid4().hex}"),
        ):
            try:
                measured, filled = await _backend(url)
            except Exception as error:  # a store this branch cannot open yet: say so, measure the rest
                sections.append(f"**{name}**: not measured ({type(error).__name__}: {str(error)[:160]})")
                continue
            header = ("page", "server ms (median)", "/healthz ms", "page / floor")
            sections.append(f"**{name}** (filled in {filled:.1f} s)\n\n{table(header, measured)}")
    return "\n\n".join(sections)


def run() -> str:
    return (
        "## Console pages\n\n"
        f"Server time per page at {SESSIONS:,} sessions and {RUNS:,} runs (a {MESSAGES}-message conversation in "
        f"one session; the memory pages as an admin over {DOCUMENTS:,} documents of ~2 KB), the app in process "
        "through httpx's ASGI transport, signed in as the member owning "
        f"everything; median of {ROUNDS * PER_ROUND} requests each, alternating with `/healthz` through the same "
        "stack. Pages read one page of rows (50) from the store, never the whole table.\n\n"
        + asyncio.run(_all())
        + "\n"
    )


if __name__ == "__main__":
    print(run())
