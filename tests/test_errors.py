"""One class per stable code, the same from the embedded store and over HTTP."""

from __future__ import annotations

import keepstate
from keepstate import errors

SPEC_TABLE = {
    "invalid_key": ("InvalidKey", 400),
    "invalid_value": ("InvalidValue", 400),
    "invalid_request": ("InvalidRequest", 400),
    "unauthorized": ("Unauthorized", 401),
    "forbidden": ("Forbidden", 403),
    "not_found": ("NotFound", 404),
    "version_conflict": ("VersionConflict", 409),
    "not_a_list": ("NotAList", 409),
    "no_session": ("NoSession", 409),
    "no_user": ("NoUser", 409),
    "no_embedder": ("NoEmbedder", 409),
    "session_busy": ("SessionBusy", 409),
    "not_held": ("NotHeld", 409),
    "too_large": ("TooLarge", 413),
    "unavailable": ("Unavailable", 503),
}


def test_every_code_of_the_spec_has_its_class_importable_from_keepstate() -> None:
    for code, (name, status) in SPEC_TABLE.items():
        cls = getattr(keepstate, name)
        assert issubclass(cls, keepstate.KeepstateError)
        assert (cls.code, cls.status) == (code, status)
        assert errors.ERRORS[code] is cls


def test_wire_round_trip_keeps_class_and_details() -> None:
    sent = keepstate.VersionConflict(current_version=7)
    back = errors.from_wire(409, sent.to_dict())
    assert type(back) is keepstate.VersionConflict and back.current_version == 7
    path = errors.from_wire(400, keepstate.InvalidValue("bad", path="$.a[1]").to_dict())
    assert isinstance(path, keepstate.InvalidValue) and path.path == "$.a[1]"
    retry = errors.from_wire(503, {"error": "unavailable", "message": "down", "retry_after": 3})
    assert isinstance(retry, keepstate.Unavailable) and retry.retry_after == 3


def test_unknown_error_bodies_still_raise_a_keepstate_error() -> None:
    unknown = errors.from_wire(502, "<html>bad gateway</html>")
    assert isinstance(unknown, keepstate.KeepstateError) and unknown.status == 502
    novel = errors.from_wire(418, {"error": "teapot", "message": "short and stout"})
    assert novel.code == "internal" and novel.message == "short and stout"


def test_no_builtin_is_shadowed() -> None:
    import builtins

    assert not {cls.__name__ for cls in errors.ERRORS.values()} & set(dir(builtins))
