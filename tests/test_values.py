"""The State API's value and key rules, on the Python side (encode) and on bodies (parse)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import keepstate
from keepstate import InvalidKey, InvalidValue, jsontext, values
from keepstate.values import MAX_DEPTH

REFUSED_BODIES = [
    (b'{"a": [1, 2, {"b": NaN}]}', "$.a[2].b"),
    (b'{"a": Infinity}', "$.a"),
    (b"[-Infinity]", "$[0]"),
    (b'{"x": 1e400}', "$.x"),
    (b'{"x": -1e400}', "$.x"),
    (b"[1, 9223372036854775808]", "$[1]"),
    (b"[-9223372036854775809]", "$[0]"),
    (b"[18446744073709551616]", "$[0]"),
    (b'{"s": "a\\u0000b"}', "$.s"),
    (b'{"a\\u0000": 1}', '$["a\\u0000"]'),
    (b'{"items": ["ok", "\\ud800"]}', "$.items[1]"),
    (b'{"not json"', "$"),
    (b"", "$"),
    (b"\xff\xfe", "$"),
    (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "$" + "[0]" * MAX_DEPTH),
    (b"[" * 5000 + b"]" * 5000, "$"),
    # not one value, with more brackets than MAX_DEPTH: the depth is checked by wrapping the text in
    # lists (jsontext.loads_within), and these would fill the wrapping lists some other way
    (b",".join([b"[]"] * (MAX_DEPTH + 1)), "$"),
    (b"1],[" + b"[]," * (MAX_DEPTH + 1) + b"2", "$"),
    (b"[]" * (MAX_DEPTH + 1), "$"),
    (b"]" + b"[" * (MAX_DEPTH + 2), "$"),
    (b" " + b"{}," * MAX_DEPTH + b"{} ", "$"),
]


@pytest.mark.parametrize(("body", "path"), REFUSED_BODIES)
def test_bad_bodies_are_refused_while_parsing_with_the_path(body: bytes, path: str) -> None:
    with pytest.raises(InvalidValue) as caught:
        values.parse(body)
    assert caught.value.path == path
    assert caught.value.code == "invalid_value" and caught.value.status == 400


@pytest.mark.parametrize(
    "body",
    [
        b'{"id": "12345678901234567890123"}',  # long digits inside a string: a false alarm
        b"9223372036854775807",
        b"-9223372036854775808",
        b"1.7976931348623157e308",
        b'"\\\\u0000"',  # an escaped backslash, then the text u0000: no NUL
        b"[" * MAX_DEPTH + b"]" * MAX_DEPTH,
        b'{"a":' * MAX_DEPTH + b"1" + b"}" * MAX_DEPTH,
        b"[" * MAX_DEPTH + b"1],[2" + b"]" * MAX_DEPTH,  # siblings at the deepest level: one value
        b" [" + b"[]," * (MAX_DEPTH * 3) + b"{}] ",
    ],
)
def test_good_bodies_parse_exactly(body: bytes) -> None:
    import json

    assert values.parse(body) == json.loads(body)


def test_encode_refuses_what_orjson_would_let_through() -> None:
    cases = {
        "$.n": {"n": float("nan")},
        "$[0]": [float("inf")],
        "$.big": {"big": 2**63},
        "$.s": {"s": "\x00"},
        "$.k": {"k": {1: "non-string key"}},
        "$.o": {"o": object()},
        "$.deep" + "[0]" * (MAX_DEPTH - 1): {"deep": [[]] if MAX_DEPTH < 2 else _nest(MAX_DEPTH)},
    }
    for path, value in cases.items():
        with pytest.raises(InvalidValue) as caught:
            values.encode(value)
        assert caught.value.path == path, value


def _nest(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_encode_is_compact_canonical_utf8() -> None:
    assert values.encode({"a": [1, "é", None]}) == '{"a":[1,"é",null]}'.encode()
    assert values.encode((1, 2)) == b"[1,2]"
    assert values.encode({"v": keepstate.Versioned({"a": 1}, 3)}) == b'{"v":[{"a":1},3]}'


def test_items_that_alone_pass_one_mib_are_too_large() -> None:
    half = "x" * (values.MAX_VALUE_BYTES // 2)
    with pytest.raises(keepstate.TooLarge):
        values.encode_items([half, half])
    assert len(values.encode_items([half[:-4], half[:-4]])) == 2  # 2 + 2 * (len + 2 quotes) + 1 comma fits


def test_items_report_their_index() -> None:
    with pytest.raises(InvalidValue) as caught:
        values.encode_items([1, {"x": [float("nan")]}])
    assert caught.value.path == "$[1].x[0]"


@pytest.mark.parametrize("key", ["a", "A-z_0.9:x", "k" * 200])
def test_good_keys(key: str) -> None:
    assert values.check_key(key) == key


@pytest.mark.parametrize("key", ["", "k" * 201, "a b", "a/b", "ü", None, 5])
def test_bad_keys(key: object) -> None:
    with pytest.raises(InvalidKey):
        values.check_key(key)


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["\x00", "9" * 25, "\ud800"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


def _outcome(fn: Callable[[], object]) -> object:
    try:
        return fn()
    except InvalidValue as error:
        return ("refused", error.message, error.path)


@settings(max_examples=500, deadline=None)
@given(st.lists(_VALUES, max_size=6))
@example([1, float("nan")])
@example([{"a": (1, 2)}, float("-inf")])
@example(["ok", 2**64])
@example(["\x00", "1" * 25])
@example([uuid.UUID(int=1)])
def test_encoding_together_answers_exactly_as_encoding_one_by_one(batch: list[object]) -> None:
    """``encode_all`` checks a batch at once: it must accept, refuse and encode what ``encode`` does."""
    one_by_one = _outcome(lambda: [values.encode(value) for value in batch])
    assert _outcome(lambda: values.encode_all(batch)) == one_by_one


def test_a_batch_of_deep_values_is_checked_value_by_value() -> None:
    fine = [_nest(MAX_DEPTH)] * 3  # each exactly at the limit; together well past it
    assert values.encode_all(fine) == [values.encode(value) for value in fine]
    with pytest.raises(InvalidValue):
        values.encode_all([*fine, _nest(MAX_DEPTH + 1)])


@given(st.binary(max_size=60), st.integers(min_value=0, max_value=30))
def test_the_long_digit_scan_finds_what_the_regular_expression_finds(noise: bytes, run: int) -> None:
    data = noise[:30] + b"7" * run + noise[30:]
    assert jsontext.has_long_digits(data) == (re.search(rb"\d{19,}", data) is not None)


# Big bodies of every shape: checked at C speed, never by the Python walk --------------------------


def _body(value_text: bytes) -> bytes:
    return b'{"value":' + value_text + b"}"


def _row(element: bytes, count: int) -> bytes:
    return b"[" + b",".join([element] * count) + b"]"


_CHAIN = b"[" * 126 + b"]" * 126
BIG_GOOD_BODIES = {
    "690k objects": _body(_row(b"{}", 690_000)),
    "690k arrays": _body(_row(b"[]", 690_000)),
    "8,000 chains 126 deep": _body(_row(_CHAIN, 8_000)),
    "a value 128 deep": _body(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH),
    "ids of 22 digits in strings": _body(_row(b'{"id":"1234567890123456789012","n":1234567890123456789}', 35_000)),
    "a chat": _body(_row(b'{"role":"user","content":"hello\\n \\"there\\" [1] {2}","n":[1,2.5]}', 20_000)),
}


@pytest.fixture
def no_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python walk of a value raises: these checks must not fall back to it."""

    def walk(*args: object) -> None:
        raise AssertionError("the Python walk ran")

    monkeypatch.setattr(values, "_find_bad", walk)


@pytest.mark.usefixtures("no_walk")
@pytest.mark.parametrize("name", list(BIG_GOOD_BODIES))
def test_big_good_bodies_parse_and_encode_without_a_walk(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    body = BIG_GOOD_BODIES[name]
    assert len(body) <= values.MAX_BODY_BYTES
    monkeypatch.setattr(
        values, "_parse_exactly", lambda *args: pytest.fail("a good body was parsed twice"), raising=False
    )
    parsed = values.parse(body, MAX_DEPTH + 1)
    assert parsed == orjson.loads(body)
    assert values.encode(parsed["value"]) == orjson.dumps(parsed["value"])


BIG_BAD_BODIES = [
    (_body(_row(b"{}", 690_000)[:-1] + b',"\\u0000"]'), "$.value[690000]", "U+0000"),
    (_body(_row(b"[]", 690_000)[:-1] + b",[18446744073709551616]]"), "$.value[690000][0]", "64-bit"),
    (_body(_row(_CHAIN, 8_000)[:-1] + b',{"k":NaN}]'), "$.value[8000].k", "NaN"),
    (_body(_row(b'{"a":"b"}', 200_000)[:-1] + b',{"a":1,"b\\ud800":2}]'), '$.value[200000]["b\\ud800"]', "surrogate"),
    (_body(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)), "$.value" + "[0]" * MAX_DEPTH, "nesting"),
    (_body(_row(_CHAIN, 8_000)[:-1] + b"," + b"[" * 128 + b"]" * 128 + b"]"), "$.value[8000]" + "[0]" * 127, "nesting"),
]


@pytest.mark.usefixtures("no_walk")
@pytest.mark.parametrize(("body", "path", "said"), BIG_BAD_BODIES)
def test_big_bad_bodies_are_refused_at_their_first_bad_place(body: bytes, path: str, said: str) -> None:
    assert len(body) <= values.MAX_BODY_BYTES
    with pytest.raises(InvalidValue) as caught:
        values.parse(body, MAX_DEPTH + 1)
    assert caught.value.path == path and said in caught.value.message


@pytest.mark.usefixtures("no_walk")
def test_big_bad_values_are_refused_by_encode_at_their_first_bad_place() -> None:
    row: list[object] = [{} for _ in range(690_000)]
    cases: list[tuple[object, str]] = [
        ("\x00", "$[690000]"),
        (2**64, "$[690000]"),
        (float("nan"), "$[690000]"),
        ({"k": [float("inf")]}, "$[690000].k[0]"),
        (_nest(MAX_DEPTH), "$[690000]" + "[0]" * (MAX_DEPTH - 1)),
    ]
    for bad, path in cases:
        with pytest.raises(InvalidValue) as caught:
            values.encode([*row, bad])
        assert caught.value.path == path, bad
