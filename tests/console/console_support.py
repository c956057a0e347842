"""Helpers of the console suite (and ``bench/bench_console.py``): signing in, reading pages, seeding.

``Console`` is an httpx client of a real ``keepstate serve`` signed in to its console the way a
browser is (the sign-in form's value and cookie, then the session cookie), plus the API calls a
test needs to set a scene (keys, sessions, runs). ``in_process`` runs the same app in this process
over a memory or SQLite store, for the scale tests and the benchmark; ``seed`` fills a store through
the platform's own calls (no SQL, no shortcuts past its rules).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from keepstate.clock import now_ms
from keepstate.platform import Invocations, Platform
from keepstate.platform.auth import hash_secret
from keepstate.platform.models import Caller
from keepstate.platform.state import Address
from keepstate.protocol import MAX_RUN_EVENTS
from keepstate.server.app import create_app

HELD_EVENTS = 1000
"""Events of the first held run (a turn's streamed tokens): its page's event read is part of its cost."""
FORM_VALUE = re.compile(r'name="(?:form|csrf)" value="([^"]+)"')


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def form_value(html: str) -> str:
    """The anti-forgery value of the first form of a page (``form`` on the sign-in page, else ``csrf``)."""
    found = FORM_VALUE.search(html)
    assert found is not None, html[:2000]
    return found.group(1)


def tbody(html: str) -> str:
    """The first table body of a page (its rows)."""
    return re.split(r"<tbody[^>]*>", html, maxsplit=1)[1].split("</tbody>", 1)[0]


def rows(html: str) -> int:
    """How many rows a page's first table body has (an empty table's one "No ..." row counts 0)."""
    body = tbody(html)
    return body.count("<tr>") + body.count("<tr ") - body.count('class="empty"')


def next_link(html: str) -> str | None:
    """The ``Next page`` link of a page, unescaped, or None at the last page."""
    found = re.search(r'<a href="([^"]+)" rel="next">', html)
    return None if found is None else found.group(1).replace("&amp;", "&")


def sign_in_form(page: httpx.Response, key: str) -> dict[str, str]:
    """The fields a browser posts from the sign-in ``page`` with ``key`` typed in."""
    return {"form": form_value(page.text), "key": key}


async def sign_in(client: httpx.AsyncClient, key: str) -> str:
    """Sign an in-process ``client`` in with ``key`` as a browser does; its session's csrf value."""
    fields = sign_in_form(await client.get("/console/"), key)
    answer = await client.post("/console/sign-in", data=fields, headers={"Origin": str(client.base_url).rstrip("/")})
    assert answer.status_code == 303, answer.text
    return form_value((await client.get("/console/sessions")).text)


class Console:
    """A signed-in console client of one server, and API calls with keys of its environment."""

    def __init__(self, url: str, admin_key: str) -> None:
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=30, follow_redirects=False)
        self.admin = admin_key
        self.csrf = ""

    def new_key(self, role: str, name: str | None = None) -> tuple[str, str]:
        """A fresh key of ``role``: ``(id, secret)``."""
        answer = self.http.post("/v0/keys", json={"role": role, "name": name}, headers=bearer(self.admin))
        assert answer.status_code == 201, answer.text
        return answer.json()["id"], answer.json()["key"]

    def api(self, method: str, path: str, key: str, **kwargs: Any) -> Any:
        answer = self.http.request(method, path, headers=bearer(key), **kwargs)
        assert answer.status_code < 300, answer.text
        return answer.json() if answer.content else None

    def sign_in(self, key: str) -> str:
        """Sign this client in with ``key``; its csrf value."""
        answer = self.post("/console/sign-in", sign_in_form(self.http.get("/console/"), key))
        assert answer.status_code == 303, answer.text
        self.csrf = form_value(self.http.get("/console/sessions").text)
        return self.csrf

    def post(self, path: str, fields: dict[str, str], origin: str | None = "self") -> httpx.Response:
        """A console form POST; ``origin`` "self" sends this server's, None sends none."""
        headers = {} if origin is None else {"Origin": self.url if origin == "self" else origin}
        return self.http.post(path, data=fields, headers=headers)

    def close(self) -> None:
        self.http.close()


class CuttableProxy:
    """A TCP forwarder on 127.0.0.1 to a real server, for a browser to reach it through: ``cut()`` drops
    every connection open now (both sides, at once, as a network that fails does) and goes on
    accepting new ones. Threads, so a synchronous test (Playwright's) can use it."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("http://").rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for one in (source, sink):
                with contextlib.suppress(OSError):
                    one.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        with self.lock:
            cut, self.open = self.open, []
        for one in cut:
            with contextlib.suppress(OSError):
                one.shutdown(socket.SHUT_RDWR)
            one.close()

    def close(self) -> None:
        self.listener.close()
        self.cut()


@contextlib.asynccontextmanager
async def in_process(store_url: str) -> AsyncIterator[tuple[httpx.AsyncClient, Platform]]:
    """The whole app (API and console) in this process over ``store_url``, started and stopped as a
    server starts it; an httpx client of it and the app's own platform."""
    app = create_app(store_url)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://console.test") as client:
            yield client, app.state.platform


# ---------------------------------------------------------------- seeding


@dataclass
class Seeded:
    """What ``seed`` made: keys' secrets, and the ids a test or benchmark visits."""

    admin: str
    member: str
    sessions: list[str]
    runs: list[str]
    conversation: str
    """The session whose agent ``chat`` holds a conversation of ``messages`` messages under ``history``."""
    held: list[str]


async def seed(platform: Platform, sessions: int, runs: int, messages: int, env: str = "default") -> Seeded:
    """Fill ``env`` with ``sessions`` sessions (one member's, 50 end users) and ``runs`` runs: one turn
    in each session first (done, failed or cancelled), then runs without a session across ten agents,
    up to 200 of them held, one in twenty cancelled, the rest queued; and one session's conversation."""
    admin_key, admin = await platform.create_key(env, "admin", "seed admin")
    member_key, member_secret = await platform.create_key(env, "member", "seed member")
    member = Caller(env, "member", member_key.id)
    worker = Caller(env, "admin", admin_key.id)
    made = await _gathered([platform.create_session(member, {"user": f"user-{n % 50}"}) for n in range(sessions)])
    session_ids = [s.id for s, _ in made]
    turns = await _gathered(
        [
            platform.start_run(member, {"agent": "chat", "input": {"n": n}, "session_id": sid})
            for n, sid in enumerate(session_ids[:runs])
        ]
    )
    await _finish_all(platform, worker, "chat", len(turns))
    rest = max(0, runs - len(turns))
    loose = await _gathered(
        [platform.start_run(member, {"agent": f"agent-{n % 10}", "input": {"n": n}}) for n in range(rest)]
    )
    held = await _hold_some(platform, worker, "agent-3", min(200, rest // 10))
    for run, _ in loose[::20]:
        if run.id not in held:
            await platform.cancel(member, run.id)
    conversation = session_ids[0]
    await _conversation(platform, member, conversation, messages)
    return Seeded(admin, member_secret, session_ids, [r.id for r, _ in turns + loose], conversation, held)


async def _gathered(calls: list[Any], batch: int = 200) -> list[Any]:
    """Run calls in batches at once (on SQLite one group commit each), in order."""
    done: list[Any] = []
    for start in range(0, len(calls), batch):
        done.extend(await asyncio.gather(*calls[start : start + batch]))
    return done


async def _finish_all(platform: Platform, worker: Caller, agent: str, count: int) -> None:
    """Claim ``count`` invocations of ``agent`` and end them: done, failed or cancelled in turn."""
    invocations = Invocations(platform)
    for n in range(count):
        claimed = await invocations.claim(worker, [agent], 0)
        assert claimed is not None
        if n % 3 == 0:
            await invocations.finish(claimed.token, claimed.invocation.id, "complete", {"output": {"ok": n}})
            continue
        if n % 3 == 2:
            await platform.cancel(worker, claimed.run.id)  # requested: failing it now makes it cancelled
        error = {"error": {"type": "ValueError", "message": "bad input"}}
        await invocations.finish(claimed.token, claimed.invocation.id, "fail", error)


async def _hold_some(platform: Platform, worker: Caller, agent: str, count: int) -> list[str]:
    """``count`` runs held; the first one emitted ``HELD_EVENTS`` events first (its page shows the last 100)."""
    invocations = Invocations(platform)
    held: list[str] = []
    for _ in range(count):
        claimed = await invocations.claim(worker, [agent], 0)
        assert claimed is not None
        if not held:
            log = platform.repo.events
            for first in range(0, HELD_EVENTS, 100):
                items = [("token", b'"word %d "' % n) for n in range(first, first + 100)]
                await log.emit(claimed.invocation.id, hash_secret(claimed.token), items, now_ms(), MAX_RUN_EVENTS)
        await invocations.finish(claimed.token, claimed.invocation.id, "hold", {"request": {"approve": "spend"}})
        held.append(claimed.run.id)
    return held


async def _conversation(platform: Platform, member: Caller, session_id: str, messages: int) -> None:
    """``messages`` alternating user/assistant messages in the session's ``chat`` state, ``history``."""
    from keepstate import values
    from keepstate.platform import StateApi

    api = StateApi(platform.state)
    ns = await api.namespace(platform, member, Address("session", id=session_id, agent="chat"))
    items = [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n}: " + "words " * 12}
        for n in range(messages)
    ]
    for start in range(0, len(items), 100):
        await platform.state.append(ns, "history", values.encode_items(items[start : start + 100]))
    await platform.state.put(ns, "profile", values.encode({"name": "Ada", "plan": "pro"}))
