"""``keepstate.testing.run_agent``: agents run in-process on an embedded store, same Invocation interface."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sdk_seed_chat import chat  # the seed example, as written

import keepstate
from keepstate.client import AsyncInvocation, Invocation
from keepstate.testing import Held, Recorder, arun_agent, run_agent


def approve(inv: Invocation) -> Any:
    if inv.kind == "start":
        inv.state.run.put("draft", {"amount": "12.50"})
        inv.hold({"question": "pay 12.50?"})
    draft = inv.state.run.get("draft")
    return {"paid": inv.decision["approved"], "draft": draft}


def test_chat_keeps_history_per_session_and_visits_per_agent() -> None:
    store = keepstate.open("memory://")
    assert run_agent(chat, {"message": "hi"}, session_id="s1", store=store, agent="chat") == {
        "reply": "turn 1: you said 'hi'",
        "visits": 1,
    }
    second = run_agent(chat, {"message": "again"}, session_id="s1", store=store, agent="chat")
    assert second == {"reply": "turn 2: you said 'again'", "visits": 2}
    other = run_agent(chat, {"message": "yo"}, session_id="s2", store=store, agent="chat")
    assert other == {"reply": "turn 1: you said 'yo'", "visits": 3}
    history = store.scope("session", agent="chat", id="s1").get("history")
    assert [item["role"] for item in history] == ["user", "assistant", "user", "assistant"]


def test_default_store_is_fresh_each_call() -> None:
    assert run_agent(chat, {"message": "a"}, session_id="s")["visits"] == 1
    assert run_agent(chat, {"message": "a"}, session_id="s")["visits"] == 1


def test_store_url_is_opened_and_state_survives(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agent.db'}"
    run_agent(chat, {"message": "a"}, session_id="s", store=url, agent="chat")
    assert run_agent(chat, {"message": "b"}, session_id="s", store=url, agent="chat")["visits"] == 2
    with keepstate.open(url) as store:
        assert store.scope("agent", agent="chat").get("visits") == 2


def test_hold_returns_held_then_resume_sees_run_state() -> None:
    store = keepstate.open("memory://")
    held = run_agent(approve, {"x": 1}, store=store)
    assert isinstance(held, Held)
    assert held == {"question": "pay 12.50?"}
    assert held.request == {"question": "pay 12.50?"}
    done = run_agent(approve, {"x": 1}, store=store, run_id=held.run_id, decision={"approved": True})
    assert done == {"paid": True, "draft": {"amount": "12.50"}}
    assert not isinstance(done, Held)


def test_session_and_user_scopes_are_refused_without_them() -> None:
    with pytest.raises(keepstate.NoSession):
        run_agent(chat, {"message": "hi"})

    def by_user(inv: Invocation) -> Any:
        return inv.state.user.update("n", lambda n: n + 1, default=0)

    with pytest.raises(keepstate.NoUser):
        run_agent(by_user)
    store = keepstate.open("memory://")
    assert run_agent(by_user, user="cust-1", store=store) == 1
    assert run_agent(by_user, user="cust-1", store=store) == 2
    assert run_agent(by_user, user="cust-2", store=store) == 1


def test_invocation_facts_and_child_runs() -> None:
    seen: dict[str, Any] = {}

    def parent(inv: Invocation) -> str:
        seen.update(kind=inv.kind, session=inv.session_id, user=inv.user, agent=inv.agent, input=inv.input)
        return inv.start_run("helper", {"q": 1}).id

    children = Recorder()
    child_id = run_agent(parent, {"a": 1}, session_id="s", user="u", agent="boss", children=children)
    assert seen == {"kind": "start", "session": "s", "user": "u", "agent": "boss", "input": {"a": 1}}
    assert [run.id for run in children.runs] == [child_id]
    assert children.runs[0].agent == "helper"
    assert children.runs[0].user == "u"
    assert children.runs[0].status == "queued"


def test_errors_are_the_store_errors() -> None:
    def bad(inv: Invocation) -> None:
        inv.state.agent.put("k", float("nan"))

    with pytest.raises(keepstate.InvalidValue):
        run_agent(bad)

    def conflict(inv: Invocation) -> None:
        inv.state.agent.put("k", 1)
        inv.state.agent.put("k", 2, if_version=5)

    with pytest.raises(keepstate.VersionConflict) as caught:
        run_agent(conflict)
    assert caught.value.current_version == 1


def test_agent_exception_propagates() -> None:
    def boom(inv: Invocation) -> None:
        raise ValueError("nope")

    with pytest.raises(ValueError, match="nope"):
        run_agent(boom)


async def achat(inv: AsyncInvocation) -> dict[str, Any]:
    history = await inv.state.session.append("history", [inv.input])
    visits = await inv.state.agent.update("visits", lambda n: n + 1, default=0)
    keys = [key async for key, _ in inv.state.session.keys()]
    if inv.input == "hold":
        inv.hold("please")
    return {"length": history.length, "visits": visits, "keys": keys}


async def test_async_agent_from_async_code() -> None:
    store = keepstate.open("memory://")
    assert await arun_agent(achat, "a", session_id="s", store=store) == {"length": 1, "visits": 1, "keys": ["history"]}
    held = await arun_agent(achat, "hold", session_id="s", store=store)
    assert isinstance(held, Held)
    assert held == "please"


def test_async_agent_from_sync_code() -> None:
    assert run_agent(achat, "x", session_id="s") == {"length": 1, "visits": 1, "keys": ["history"]}
