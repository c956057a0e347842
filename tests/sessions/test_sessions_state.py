"""SessionState's rules and its lossless JSON form; memory:// naming."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepstate import InvalidValue
from keepstate.sessions import SessionState, open_session_store
from keepstate.sessions import state as state_module
from keepstate.sessions.state import is_credential_key, sanitize


def test_history_is_bounded_and_message_count_is_lifetime() -> None:
    state = SessionState(history_limit=3)
    for n in range(7):
        state.add_message("user" if n % 2 == 0 else "assistant", f"m{n}")
    assert [m["content"] for m in state.history] == ["m4", "m5", "m6"]
    assert state.message_count == 7
    assert SessionState().history_limit == 50
    with pytest.raises(InvalidValue):
        state.add_message("system", "not a conversation role")


def test_facts_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1_000_000]  # the state's clock, moved by the test: no sleep races the 50 ms
    monkeypatch.setattr(state_module, "now_ms", lambda: clock[0])
    state = SessionState()
    state.set_fact("city", "Nablus", source="user")
    state.set_fact("quote", {"price": 12}, source="api:quotes", ttl_seconds=0.05)
    clock[0] += 49
    assert state.get_fact("quote") == {"price": 12}
    clock[0] += 1
    assert state.get_fact("quote") is None
    assert state.get_fact("city") == "Nablus"
    assert state.facts["city"]["source"] == "user"
    assert state.get_fact("missing") is None


def test_host_context_is_sanitised_at_any_depth() -> None:
    state = SessionState()
    state.set_host_context(
        {
            "tenant": {"id": "tenant_42", "API_KEY": "k", "nested": [{"Authorization": "Bearer x", "ok": 1}]},
            "locale": "ar-PS",
            "Cookie": "sid=1",
            "x-api-key": "k2",
            "access_token": "t",
            "Password": "p",
            "client_secret": "s",
        }
    )
    assert state.host_context == {"tenant": {"id": "tenant_42", "nested": [{"ok": 1}]}, "locale": "ar-PS"}
    assert is_credential_key("Refresh-Token") and is_credential_key("SESSION_COOKIE")
    assert not is_credential_key("tenant") and not is_credential_key("locale")
    original = {"upstream": {"password": "p", "host": "h"}}
    assert sanitize(original) == {"upstream": {"host": "h"}}
    assert original == {"upstream": {"password": "p", "host": "h"}}  # a copy


@pytest.mark.parametrize(
    "name",
    [
        "auth",
        "Auth",
        "AUTH",
        "x-auth",
        "authHeader",
        "auth_token",
        "OAuth",
        "pwd",
        "DB_PWD",
        "userPwd",
        "passphrase",
        "keyPassphrase",
        "jwt",
        "JWT",
        "idJwt",
        "jwt_secret",
        "db_pass",
        "sid",
        "csrf-token",
    ],
)
def test_common_credential_names_are_removed_at_every_depth(name: str) -> None:
    context = {name: "x", "tenant": {name: "y", "list": [{name: "z", "ok": 1}]}}
    assert sanitize(context) == {"tenant": {"list": [{"ok": 1}]}}


@pytest.mark.parametrize("name", ["author", "authors", "compass", "passenger", "sidebar"])
def test_words_that_merely_contain_a_short_credential_word_are_kept(name: str) -> None:
    assert sanitize({name: "v"}) == {name: "v"}


def test_json_round_trip_is_lossless() -> None:
    state = SessionState(
        state={"big": 2**63 - 1, "pi": 3.141592653589793, "text": "é😀"},
        stack=[{"dep": "quotes", "step": 1}],
        pending_selection={"items": [{"id": 7}]},
        pending_confirmation={"request": {"seat": "A1"}},
        references={"hotel": {"id": "h1"}},
        config_hash="abc",
        expires_at=1_900_000_000_000,
        phase="executing",
        effect={"name": "book"},
        history_limit=10,
    )
    state.add_message("user", "hi")
    state.set_fact("f", [1, 2], source="s", ttl_seconds=60)
    state.set_host_context({"tenant": {"id": "t"}})
    again = SessionState.from_json(state.to_json())
    assert again == state
    assert again.to_json() == state.to_json()
    assert '"version":2' in state.to_json()


def test_non_json_state_is_refused_with_a_path() -> None:
    with pytest.raises(InvalidValue) as caught:
        SessionState(state={"bad": float("nan")}).to_json()
    assert caught.value.path == "$.state.bad"
    with pytest.raises(InvalidValue):
        SessionState.from_json('{"version": 3}')


keys = st.text(max_size=5).filter(lambda k: "\x00" not in k)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8", blacklist_characters="\x00")),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(state=st.dictionaries(st.text(max_size=8).filter(lambda k: "\x00" not in k), json_values, max_size=5))
def test_any_json_state_round_trips(state: dict[str, object]) -> None:
    session = SessionState(state=state, pending_selection=state)
    assert SessionState.from_json(session.to_json()) == session


async def test_memory_urls_share_by_name() -> None:
    await open_session_store("memory://shared-name-test").set("m", SessionState(state={"shared": 1}))
    again = await open_session_store("memory://shared-name-test").get("m")
    assert again is not None and again.state == {"shared": 1}
    assert await open_session_store("memory://").get("m") is None
    assert await open_session_store("memory://another-name").get("m") is None
