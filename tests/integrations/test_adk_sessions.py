"""ADK's session-service contract, as one suite over every service in targets.ADK_SERVICES.

google-adk's sdist ships no tests, so this suite restates, in our own words, every case of ADK's
session-service tests (tests/unittests/sessions/ in google/adk-python, read at the 2.13 line)
that holds for any ``BaseSessionService``: create/get/list/delete, ``append_event`` with state
deltas under the ``app:``, ``user:`` and ``temp:`` prefixes, ``GetSessionConfig``,
``get_user_state`` and stale sessions. Cases about one backend's internals (SQLAlchemy engines,
rollback spies, table preparation) are not restated. It is shown right by passing on ADK's own
``InMemorySessionService`` and ``DatabaseSessionService``.

Stale sessions: a session object loaded before another writer appended is *stale*. ADK lets a
service either refuse an append through it (``StaleSessionError``, storage unchanged) or apply the
append on top of what storage holds (nothing lost). Which one a service does is declared in its
target entry (``refuses_stale``); silently dropping either write is never allowed. keepstate's
service applies it on top unless its delta writes a key another writer changed since, which it
refuses (test_adk_stale.py); the appends here write keys of their own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import targets
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions import BaseSessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

APP, USER = "my_app", "u1"


@pytest.fixture(params=sorted(targets.ADK_SERVICES))
def adk_target(request: pytest.FixtureRequest) -> targets.InProcess:
    return targets.ADK_SERVICES[request.param]


@pytest.fixture
async def service(adk_target: targets.InProcess, request: pytest.FixtureRequest) -> AsyncIterator[BaseSessionService]:
    async with adk_target.open(request) as opened:
        yield opened


def delta_event(invocation: str, delta: dict[str, object], timestamp: float | None = None) -> Event:
    stamp = {} if timestamp is None else {"timestamp": timestamp}
    return Event(invocation_id=invocation, author="user", actions=EventActions(state_delta=delta), **stamp)


async def reload(service: BaseSessionService, session: Session) -> Session:
    got = await service.get_session(app_name=session.app_name, user_id=session.user_id, session_id=session.id)
    assert got is not None
    return got


# --- create, get, list, delete -------------------------------------------------------------


async def test_unknown_session_is_none(service: BaseSessionService) -> None:
    assert await service.get_session(app_name=APP, user_id=USER, session_id="123") is None


async def test_create_get_delete(service: BaseSessionService) -> None:
    created = await service.create_session(app_name=APP, user_id=USER, state={"key": "value"})
    assert (created.app_name, created.user_id, created.state) == (APP, USER, {"key": "value"})
    assert created.id and created.last_update_time <= time.time()
    assert await reload(service, created) == created
    await service.delete_session(app_name=APP, user_id=USER, session_id=created.id)
    assert await service.get_session(app_name=APP, user_id=USER, session_id=created.id) is None


async def test_delete_of_a_missing_session_is_a_no_op(service: BaseSessionService) -> None:
    await service.delete_session(app_name=APP, user_id=USER, session_id="missing")


async def test_create_with_an_existing_id_raises(service: BaseSessionService) -> None:
    await service.create_session(app_name=APP, user_id=USER, session_id="taken")
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name=APP, user_id=USER, session_id="taken")


async def test_list_sessions_of_one_user_with_their_state(service: BaseSessionService) -> None:
    ids = [f"session{i}" for i in range(5)]
    for session_id in ids:
        await service.create_session(
            app_name=APP, user_id=USER, session_id=session_id, state={"key": "value" + session_id}
        )
    listed = (await service.list_sessions(app_name=APP, user_id=USER)).sessions
    assert sorted(s.id for s in listed) == ids
    assert all(s.state == {"key": "value" + s.id} for s in listed)


async def test_list_sessions_per_user_and_for_all_users(service: BaseSessionService) -> None:
    for user, session_id in (("user1", "s1a"), ("user1", "s1b"), ("user2", "s2a")):
        await service.create_session(app_name=APP, user_id=user, session_id=session_id, state={"key": session_id})
    by_user = {
        user: {s.id: s.state for s in (await service.list_sessions(app_name=APP, user_id=user)).sessions}
        for user in ("user1", "user2")
    }
    assert by_user == {"user1": {"s1a": {"key": "s1a"}, "s1b": {"key": "s1b"}}, "user2": {"s2a": {"key": "s2a"}}}
    everyone = (await service.list_sessions(app_name=APP, user_id=None)).sessions
    assert {s.id: s.state["key"] for s in everyone} == {"s1a": "s1a", "s1b": "s1b", "s2a": "s2a"}
    assert (await service.list_sessions(app_name="other_app", user_id=None)).sessions == []


async def test_listed_sessions_carry_no_events_oldest_update_first(service: BaseSessionService) -> None:
    first = await service.create_session(app_name=APP, user_id=USER, session_id="first")
    second = await service.create_session(app_name=APP, user_id=USER, session_id="second")
    await service.append_event(first, Event(author="user", timestamp=second.last_update_time + 10))
    listed = (await service.list_sessions(app_name=APP, user_id=USER)).sessions
    assert [s.id for s in listed] == ["second", "first"]
    assert all(s.events == [] for s in listed)


async def test_get_session_is_scoped_by_user(service: BaseSessionService) -> None:
    mine = await service.create_session(app_name=APP, user_id="u1", session_id="s1")
    await service.append_event(mine, Event(invocation_id="inv1", author="user"))
    await service.create_session(app_name=APP, user_id="u2", session_id="s1")
    theirs = await service.get_session(app_name=APP, user_id="u2", session_id="s1")
    assert theirs is not None and theirs.user_id == "u2" and theirs.events == []
    assert len((await reload(service, mine)).events) == 1


# --- state scopes ---------------------------------------------------------------------------


async def test_app_state_is_shared_by_every_user_of_the_app(service: BaseSessionService) -> None:
    first = await service.create_session(app_name=APP, user_id="u1", session_id="s1", state={"app:k1": "v1"})
    await service.append_event(first, delta_event("inv1", {"app:k2": "v2"}))
    other = await service.create_session(app_name=APP, user_id="u2", session_id="s2")
    assert other.state == {"app:k1": "v1", "app:k2": "v2"}
    assert {k: v for k, v in (await reload(service, first)).state.items() if k.startswith("app:")} == other.state
    elsewhere = await service.create_session(app_name="other_app", user_id="u1", session_id="s3")
    assert elsewhere.state == {}


async def test_user_state_is_shared_only_by_that_users_sessions(service: BaseSessionService) -> None:
    first = await service.create_session(app_name=APP, user_id="u1", session_id="s1", state={"user:k1": "v1"})
    await service.append_event(first, delta_event("inv1", {"user:k2": "v2"}))
    same_user = await service.create_session(app_name=APP, user_id="u1", session_id="s1b")
    assert same_user.state == {"user:k1": "v1", "user:k2": "v2"}
    other_user = await service.create_session(app_name=APP, user_id="u2", session_id="s2")
    assert other_user.state == {}


async def test_session_state_belongs_to_its_session(service: BaseSessionService) -> None:
    first = await service.create_session(app_name=APP, user_id=USER, session_id="s1", state={"sk1": "v1"})
    await service.append_event(first, delta_event("inv1", {"sk2": "v2"}))
    assert (await reload(service, first)).state == {"sk1": "v1", "sk2": "v2"}
    assert (await service.create_session(app_name=APP, user_id=USER, session_id="s1b")).state == {}


async def test_state_delta_updates_the_session_object_and_storage(service: BaseSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, state={"kept": 1, "changed": 1})
    await service.append_event(session, delta_event("inv1", {"changed": 2, "added": {"nested": [1, 2]}}))
    expected = {"kept": 1, "changed": 2, "added": {"nested": [1, 2]}}
    assert session.state == expected
    assert (await reload(service, session)).state == expected


async def test_temp_state_lives_only_in_the_session_object(service: BaseSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    event = delta_event("inv1", {"temp:k1": "v1", "sk": "v2"})
    await service.append_event(session, event)
    assert session.state["temp:k1"] == "v1" and session.state["sk"] == "v2"
    assert "temp:k1" not in event.actions.state_delta and event.actions.state_delta["sk"] == "v2"
    stored = await reload(service, session)
    assert "temp:k1" not in stored.state and stored.state["sk"] == "v2"
    assert all("temp:k1" not in e.actions.state_delta for e in stored.events)


async def test_temp_state_is_visible_to_the_next_event_of_the_invocation(service: BaseSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s_seq")
    first = Event(invocation_id="inv1", author="agent1", actions=EventActions(state_delta={"temp:out": "a1"}))
    await service.append_event(session, first)
    assert session.state["temp:out"] == "a1"
    assert "temp:out" not in first.actions.state_delta
    await service.append_event(session, Event(invocation_id="inv1", author="agent2"))
    assert session.state["temp:out"] == "a1"


async def test_get_user_state(service: BaseSessionService) -> None:
    assert not await service.get_user_state(app_name=APP, user_id=USER)
    session = await service.create_session(app_name=APP, user_id=USER)
    await service.append_event(session, delta_event("i1", {"user:profile": {"name": "Alice"}, "session_key": 1}))
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"profile": {"name": "Alice"}}
    await service.append_event(session, delta_event("i2", {"user:counter": 1}))
    await service.append_event(session, delta_event("i3", {"user:counter": 2}))
    assert (await service.get_user_state(app_name=APP, user_id=USER))["counter"] == 2
    assert not await service.get_user_state(app_name=APP, user_id="u2")
    assert not await service.get_user_state(app_name="other_app", user_id=USER)


# --- events ---------------------------------------------------------------------------------


async def test_append_event_round_trips_bytes(service: BaseSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER)
    content = types.Content(role="user", parts=[types.Part.from_bytes(data=b"\x00image", mime_type="image/png")])
    grounding = types.GroundingMetadata(search_entry_point=types.SearchEntryPoint(sdk_blob=b"blob"))
    await service.append_event(
        session, Event(invocation_id="inv", author="user", content=content, grounding_metadata=grounding)
    )
    assert session.events[0].content == content
    (stored,) = (await reload(service, session)).events
    assert (stored.content, stored.grounding_metadata) == (content, grounding)


async def test_append_event_round_trips_every_field(service: BaseSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER)
    event = Event(
        invocation_id="invocation",
        author="user",
        turn_complete=True,
        partial=False,
        content=types.Content(role="user", parts=[types.Part(text="text")]),
        actions=EventActions(artifact_delta={"file": 0}, transfer_to_agent="agent", escalate=True),
        long_running_tool_ids={"tool1"},
        error_code="error_code",
        error_message="error_message",
        interrupted=True,
        grounding_metadata=types.GroundingMetadata(web_search_queries=["query1"]),
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=1, candidates_token_count=1, total_token_count=2
        ),
        citation_metadata=types.CitationMetadata(),
        custom_metadata={"custom_key": "custom_value"},
        timestamp=1700000000.123,
        input_transcription=types.Transcription(text="in", finished=True),
        output_transcription=types.Transcription(text="out", finished=True),
    )
    await service.append_event(session, event)
    assert await reload(service, session) == session


async def test_events_come_back_in_order(service: BaseSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER)
    for index in range(20):
        await service.append_event(
            session, Event(invocation_id=f"inv{index}", author="user", timestamp=session.last_update_time + 1)
        )
    assert [e.invocation_id for e in (await reload(service, session)).events] == [f"inv{i}" for i in range(20)]


async def test_last_update_time_follows_the_event(service: BaseSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER)
    before = session.last_update_time
    await service.append_event(session, Event(invocation_id="inv", author="user", timestamp=before + 10))
    assert session.last_update_time == pytest.approx(before + 10, abs=1e-6)
    assert (await reload(service, session)).last_update_time == pytest.approx(before + 10, abs=1e-6)


async def test_partial_events_are_not_persisted(service: BaseSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER)
    await service.append_event(session, Event(author="user", partial=True))
    assert session.events == []
    assert (await reload(service, session)).events == []


async def test_append_to_a_session_that_does_not_exist_raises(service: BaseSessionService) -> None:
    ghost = Session(id="ghost", app_name=APP, user_id=USER)
    with pytest.raises(SessionNotFoundError):
        await service.append_event(ghost, Event(invocation_id="inv", author="user"))
    assert await service.get_session(app_name=APP, user_id=USER, session_id="ghost") is None


# --- GetSessionConfig -----------------------------------------------------------------------


async def test_get_session_config_filters_events(service: BaseSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER)
    for stamp in range(1, 6):
        await service.append_event(session, Event(author="user", timestamp=stamp))

    async def stamps(**config: float) -> list[float]:
        got = await service.get_session(
            app_name=APP, user_id=USER, session_id=session.id, config=GetSessionConfig(**config)
        )
        assert got is not None
        return [e.timestamp for e in got.events]

    assert await stamps() == [1, 2, 3, 4, 5]
    assert await stamps(num_recent_events=0) == []
    assert await stamps(num_recent_events=3) == [3, 4, 5]
    assert await stamps(num_recent_events=10) == [1, 2, 3, 4, 5]
    assert await stamps(after_timestamp=4.0) == [4, 5]
    assert await stamps(after_timestamp=50.0) == []
    assert await stamps(after_timestamp=4.0, num_recent_events=3) == [4, 5]


async def test_get_session_config_keeps_the_whole_state(service: BaseSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER)
    for index in range(4):
        await service.append_event(session, delta_event(f"i{index}", {f"k{index}": index}, timestamp=index + 1))
    got = await service.get_session(
        app_name=APP, user_id=USER, session_id=session.id, config=GetSessionConfig(num_recent_events=1)
    )
    assert got is not None and len(got.events) == 1
    assert got.state == {"k0": 0, "k1": 1, "k2": 2, "k3": 3}


# --- stale sessions -------------------------------------------------------------------------


async def test_an_append_through_a_stale_session_is_refused_or_applied_whole(
    service: BaseSessionService, adk_target: targets.InProcess
) -> None:
    now = time.time()
    original = await service.create_session(app_name=APP, user_id=USER)
    await service.append_event(original, delta_event("inv1", {"sk1": "v1"}, timestamp=now + 1))
    updated = await reload(service, original)
    await service.append_event(updated, delta_event("inv2", {"sk2": "v2"}, timestamp=now + 2))
    assert len(original.events) == 1 and "sk2" not in original.state
    late = delta_event("inv3", {"sk3": "v3"}, timestamp=now + 3)
    if adk_target.refuses_stale:
        with pytest.raises(StaleSessionError):
            await service.append_event(original, late)
        expected, state = ["inv1", "inv2"], {"sk1": "v1", "sk2": "v2"}
    else:
        await service.append_event(original, late)
        expected, state = ["inv1", "inv2", "inv3"], {"sk1": "v1", "sk2": "v2", "sk3": "v3"}
    final = await reload(service, original)
    assert [e.invocation_id for e in final.events] == expected
    assert final.state == state


async def test_two_writers_on_one_snapshot_never_lose_silently(
    service: BaseSessionService, adk_target: targets.InProcess
) -> None:
    session = await service.create_session(app_name=APP, user_id=USER)
    rounds, landed = 8, 0
    for index in range(rounds):
        latest = await reload(service, session)
        copies = (latest.model_copy(deep=True), latest.model_copy(deep=True))
        base = latest.last_update_time + 10
        events = [delta_event(f"inv{index}-{n}", {f"sk{index}-{n}": n}, timestamp=base + n) for n in (1, 2)]
        results = await asyncio.gather(
            *(service.append_event(c, e) for c, e in zip(copies, events, strict=True)), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        assert all(isinstance(error, StaleSessionError) for error in errors), errors
        assert len(errors) <= (1 if adk_target.refuses_stale else 0), errors
        landed += len(results) - len(errors)
    final = await reload(service, session)
    assert len(final.events) == landed == len({e.invocation_id for e in final.events})
    written = {key for event in final.events for key in event.actions.state_delta}
    assert written == set(final.state)
