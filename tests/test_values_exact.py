"""The C-speed checks of ``keepstate.values`` answer exactly as the Python walk they replaced.

``values_oracle`` keeps the old ``parse``, ``encode`` and ``_find_bad``. Random values and random
JSON texts (bad literals, escapes, duplicate keys, whitespace, deep nesting) must be accepted as
the same value, or refused with the same path, by both; messages are not compared (the new ones
no longer know a refused literal's text: ``1e400`` is read as an infinite float). And the slow
paths must not hide a mistake: a value both accept never reaches the exact parse or the locator
(no false alarm), and the walk answers only for keys that are not strings.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import values_oracle as oracle
from keepstate import InvalidValue, jsontext, values
from keepstate.values import MAX_DEPTH

_SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _answer(fn: Callable[[], object]) -> tuple[str, object]:
    """What a call gives: its result, or where it refused."""
    try:
        result = fn()
    except InvalidValue as error:
        return ("refused", error.path)
    return ("accepted", _comparable(result))


def _comparable(value: object) -> object:
    """Encoded bytes as they are; a parsed value as its JSON text, which tells 1 from 1.0 and True."""
    if isinstance(value, bytes) or (isinstance(value, list) and all(isinstance(item, bytes) for item in value)):
        return value
    return json.dumps(value, ensure_ascii=True)


def _never(name: str) -> Callable[..., Any]:
    def called(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{name} must not run here")

    return called


@contextmanager
def _forbidden(*names: str) -> Iterator[None]:
    """``values``' functions called ``names`` raise AssertionError while inside."""
    with ExitStack() as stack:
        for name in names:
            stack.enter_context(mock.patch.object(values, name, _never(name)))
        yield


def _str_keys_only(value: object) -> bool:
    """Whether orjson (which refuses every key not exactly ``str``) can write the value's keys."""
    try:
        orjson.dumps(value, default=values._tuple_as_list)
    except TypeError as error:
        return not str(error).startswith(values._NON_STR_KEY)
    return True


# Python values, for encode and the locator ------------------------------------------------------


class _Name(str):
    """A str subclass: a fine key for the walk, refused by orjson."""


_BAD_SCALARS = st.sampled_from(
    [
        math.nan,
        math.inf,
        -math.inf,
        2**63,
        -(2**63) - 1,
        2**64,
        2**64 - 1,
        2**100,
        "a\x00b",
        "\ud800",
        "x\udfff",
        object(),
        b"bytes",
        {1, 2},
    ]
)
_GOOD_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.sampled_from(["1234567890123456789012", '"[{', "\\", "\\u0000", "\U0001f600", "é", -(2**63), 2**63 - 1]),
)
_KEYS = st.one_of(st.text(max_size=3), st.sampled_from(["a", "a.b", "a\x00", "\ud800", "9" * 20, '"', "\\"]))
_ODD_KEYS = st.one_of(_KEYS, st.sampled_from([1, None, 2.5, True, _Name("n")]))


def _values(scalars: st.SearchStrategy[Any], keys: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(keys, inner, max_size=4)
        ),
        max_leaves=16,
    )


_MOSTLY_GOOD = _values(st.one_of(_GOOD_SCALARS, _GOOD_SCALARS, _BAD_SCALARS), _KEYS)
_ANY = _values(st.one_of(_GOOD_SCALARS, _BAD_SCALARS), _ODD_KEYS)


def _nest(value: object, levels: int, kind: str) -> object:
    for _ in range(levels):
        value = {"k": value} if kind == "object" else [value]
    return value


_DEEP = st.builds(_nest, _MOSTLY_GOOD, st.integers(MAX_DEPTH - 6, MAX_DEPTH + 2), st.sampled_from(["array", "object"]))


@_SETTINGS
@given(st.one_of(_ANY, _DEEP, st.lists(_DEEP, max_size=3)))
@example({"a": [math.nan], "b\x00": 1})  # the later bad key comes first: keys before values
@example([{"a": 1, "b": [2**64, {"\ud800": 1}]}, "x\x00"])
@example({1: [math.nan]})
@example({"a": {1: 2}, "b": math.inf})
@example({_Name("n"): 1})
@example([(1, 2), {"v": (3, [4])}])  # tuples: no false alarm
def test_encode_answers_as_before(value: object) -> None:
    expected = _answer(lambda: oracle.encode(value))
    slow = ("_raise_first_bad",) if expected[0] == "accepted" else ("_find_bad",) if _str_keys_only(value) else ()
    with _forbidden(*slow):
        assert _answer(lambda: values.encode(value)) == expected


@_SETTINGS
@given(_ANY, st.integers(min_value=1, max_value=6))
@example({"a": [[[[1]]]], "b\x00": 1}, 2)
@example([[1, [2, [3, math.nan]]], [[[[]]]]], 3)
@example([-(2**63), 2**63 - 1, [[[2**63]]]], 3)
def test_the_locator_finds_what_the_walk_finds(value: object, max_depth: int) -> None:
    """At small depth limits every shape meets the depth rule, in any order with the other rules."""
    keys_seen = _str_keys_only(value)
    expected = _answer(lambda: oracle._find_bad(value, max_depth))
    with _forbidden(*(("_find_bad",) if keys_seen else ())):
        assert _answer(lambda: values._raise_first_bad(value, max_depth, keys_seen)) == expected


@_SETTINGS
@given(st.lists(_MOSTLY_GOOD, max_size=5))
def test_encoding_many_answers_as_encoding_each(batch: list[object]) -> None:
    each = _answer(lambda: [values.encode(value) for value in batch])
    assert _answer(lambda: values.encode_all(batch)) == each


# JSON texts, for parse --------------------------------------------------------------------------

_NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(
        [
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "1234567890123456789",
            "-1234567890123456789",
            "12345678901234567890",
            "1e400",
            "-1e400",
            "0.1234567890123456789012",
            "1.5e-12345678901234567890",
            "12345678901234567890.5",
            "1234567890123456789e2",
            "1E5",
            "-0",
            "0.0",
            "1.7976931348623157e308",
            "9" * 400,
        ]
    ),
    st.floats(allow_nan=False, allow_infinity=False).map(repr).filter(lambda text: "e" in text or "." in text),
)
_LITERALS = st.sampled_from(["true", "false", "null", "NaN", "Infinity", "-Infinity"])
_STRING_PIECES = st.sampled_from(
    [
        "a",
        "1234567890123456789012",
        "[",
        "]",
        "{",
        "}",
        ":",
        ",",
        "é",
        "\\\\",
        '\\"',
        "\\u0000",
        "\\\\u0000",
        "\\ud800",
        "\\udfff",
        "\\ud83d\\ude00",
        "\\n",
        "\\/",
        "\\u0041",
        " ",
        "N",
        "I",
    ]
)
_STRINGS = st.lists(_STRING_PIECES, max_size=4).map(lambda pieces: '"' + "".join(pieces) + '"')
_SPACE = st.sampled_from(["", "", " ", "\n\t"])
_KEY_TEXTS = st.one_of(st.sampled_from(['"a"', '"b"', '"a.b"', '"x y"']), _STRINGS)


def _array(items: list[str], space: str) -> str:
    return "[" + space + ("," + space).join(items) + "]"


def _object(pairs: list[tuple[str, str]], space: str) -> str:
    return "{" + space + ("," + space).join(f"{key}{space}:{space}{item}" for key, item in pairs) + "}"


_TEXTS = st.recursive(
    st.one_of(_NUMBERS, _NUMBERS, _LITERALS, _STRINGS, _STRINGS),
    lambda inner: st.one_of(
        st.builds(_array, st.lists(inner, max_size=4), _SPACE),
        st.builds(_object, st.lists(st.tuples(_KEY_TEXTS, inner), max_size=4), _SPACE),
    ),
    max_leaves=16,
)


def _nest_text(text: str, levels: int) -> str:
    return "[" * levels + text + "]" * levels


_DEEP_TEXTS = st.builds(_nest_text, _TEXTS, st.integers(MAX_DEPTH - 4, MAX_DEPTH + 2))


def _check_parse(body: bytes, max_depth: int) -> None:
    expected = _answer(lambda: oracle.parse(body, max_depth))
    clear = expected[0] == "accepted" and not _repeats_a_key(body)  # a repeated key hides what its text holds
    slow = ("_find_bad", "_parse_exactly") if clear else ("_find_bad",)
    with _forbidden(*slow):
        assert _answer(lambda: values.parse(body, max_depth)) == expected


def _repeats_a_key(body: bytes) -> bool:
    repeated = False

    def pairs(found: list[tuple[str, object]]) -> dict[str, object]:
        nonlocal repeated
        repeated = repeated or len({key for key, _ in found}) < len(found)
        return dict(found)

    json.loads(body, object_pairs_hook=pairs, parse_constant=float)
    return repeated


@_SETTINGS
@given(st.one_of(_TEXTS, _DEEP_TEXTS), st.sampled_from([MAX_DEPTH, MAX_DEPTH + 1, 1, 2, 3, 4]))
@example('{"a": 1, "b": 2, "a": [NaN]}', MAX_DEPTH)  # a bad value overwritten by a duplicate key
@example('{"a": [NaN], "a": 1}', MAX_DEPTH)
@example('["\\\\u0000", 12345678901234567890123]', MAX_DEPTH)
@example('{"a": [[1]], "b\\u0000": 1}', 2)
@example('[-9223372036854775808, "9223372036854775808", 1234567890123456789.5]', 2)
@example("[" * 126 + '{"a": {"a": 0, "a": []}, "a": 0}' + "]" * 126, MAX_DEPTH)  # deep text, a shallow value
@example("[" + ", ".join(['{"type": "m", "data": {"a": [1]}}'] * 3) + "]", 4)  # many containers, none deep
@example("[" + "{}," * 6 + "]", 4)  # many containers, not JSON
@example("[{]" * 3 + "]]]", 2)  # many containers, unbalanced
def test_parse_answers_as_before(text: str, max_depth: int) -> None:
    _check_parse(text.encode(), max_depth)


@_SETTINGS
@given(
    _TEXTS.filter(lambda text: "N" not in text and "I" not in text),
    st.integers(min_value=0, max_value=200),
    st.sampled_from(["NaN", "1e400", "9223372036854775808", '"\\u0000"', '"\\ud800"', "[[[[[]]]]]"]),
)
def test_one_bad_place_anywhere_is_found_where_the_walk_finds_it(text: str, where: int, bad: str) -> None:
    """A text with one bad literal put in as the first element of one of its arrays."""
    openings = [index + 1 for index, char in enumerate(text) if char == "["]
    if not openings:
        text, openings = f"[{text}]", [1]
    cut = openings[where % len(openings)]
    _check_parse((text[:cut] + bad + ("" if text[cut] == "]" else ",") + text[cut:]).encode(), 4)


# The exact checks of text, against plain Python readings -----------------------------------------


class _Object(list[tuple[str, Any]]):
    """An object's members as the text has them, a repeated key and all."""


def _read(text: str) -> object:
    return json.loads(text, object_pairs_hook=_Object, parse_constant=float)


def _members(value: object) -> list[object]:
    if isinstance(value, _Object):
        return [item for _, item in value]
    return value if isinstance(value, list) else []


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, _members(value)), default=0)
    return 0


def _ints(value: object) -> list[int]:
    if isinstance(value, list):
        return [number for item in _members(value) for number in _ints(item)]
    return [value] if isinstance(value, int) and not isinstance(value, bool) else []


def _strings(value: object) -> list[str]:
    keys = [key for key, _ in value] if isinstance(value, _Object) else []
    if isinstance(value, list):
        return [*keys, *(text for item in _members(value) for text in _strings(item))]
    return [value] if isinstance(value, str) else []


@_SETTINGS
@given(_TEXTS, st.integers(min_value=0, max_value=8))
@example("[[],[[]],[[[]]],[[],[]]]", 2)
@example('{"a": [[[]]], "a": 1}', 3)
@example("[" * 130 + "]" * 130, 129)
def test_the_depth_check_is_exact(text: str, limit: int) -> None:
    try:
        value = _read(text)
    except ValueError:
        return
    for rounds in (0, 1, jsontext._ROUNDS):  # 0: orjson decides all; otherwise what the replaces leave
        with mock.patch.object(jsontext, "_ROUNDS", rounds):
            assert jsontext.deeper_than(text.encode(), limit) == (_depth(value) > limit), rounds


@_SETTINGS
@given(_TEXTS)
@example('["1234567890123456789012", 1234567890123456789]')
@example('[-9223372036854775808, 9223372036854775807, "-9223372036854775809"]')
def test_the_integer_and_nul_checks_are_exact(text: str) -> None:
    try:
        value = _read(text)
    except ValueError:
        return
    body = text.encode()
    assert jsontext.has_big_int(body) == any(not -(2**63) <= number < 2**63 for number in _ints(value))
    assert jsontext.has_nul(body) == any("\x00" in string for string in _strings(value))
