"""Keys and JSON values: the State API's rules, enforced once for every entry point.

Values travel and rest as canonical compact UTF-8 JSON bytes (orjson). Every check runs at C speed
whatever the value's shape: orjson, the C parts of ``json`` and whole-text byte operations
(``translate``, ``replace``, ``split``, ``find``). No Python code runs per element of a value, so a
good 2 MiB request body costs about one orjson load, and a bad one is refused with the path of its
first bad place in a few loads' time (see ``_locate``).

Refused, each with the JSON path of the first bad place: NaN and ±Infinity, numbers outside the
float64 range, integers outside signed 64-bit, U+0000 or a lone surrogate in a string or object
key, nesting deeper than ``MAX_DEPTH``, non-JSON types, and (for bodies) anything not JSON.
"""

from __future__ import annotations

import json
import math
import re
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import accumulate, islice
from typing import Any

import orjson

from .errors import InvalidKey, InvalidRequest, InvalidValue, TooLarge
from .jsontext import (
    ORJSON_DEPTH,
    DeeperThan,
    first_big_int,
    holds_bad,
    load_checked,
    paused,
    skeleton_deeper,
    unescaped,
)

MAX_VALUE_BYTES = 1024 * 1024
"""A stored value, measured as its compact UTF-8 JSON encoding."""
MAX_BODY_BYTES = 2 * 1024 * 1024
"""A request body; larger ones are refused before they are read whole."""
MAX_DEPTH = 128
"""Deepest nesting of arrays and objects accepted (the top-level value is depth 1)."""
MAX_KEY_LENGTH = 200
MAX_VERSION = 2**53 - 1
"""The highest version a key or a document may hold: what every store (Redis's scripts count in
doubles) and every SDK (a JavaScript number) keep exact, and about 9.2e18 writes short of what a
signed 64-bit column holds. Writes add one each, so only an import could come near it: an import
and an ``if_version`` take nothing above it."""

_KEY = re.compile(r"[A-Za-z0-9._:\-]{1,200}")
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
INT64_MAX = _INT_MAX


def check_key(key: object, what: str = "key") -> str:
    """Return ``key`` when it is 1–200 of ``A-Z a-z 0-9 . _ : -``; else raise InvalidKey."""
    if not isinstance(key, str) or _KEY.fullmatch(key) is None:
        raise InvalidKey(f"{what} must be 1-200 of A-Z a-z 0-9 . _ : -, got {key!r:.80}")
    return key


def is_key(key: object) -> bool:
    return isinstance(key, str) and _KEY.fullmatch(key) is not None


def check_key_prefix(text: str, what: str = "prefix") -> str:
    """A key listing's ``prefix`` or ``after``: empty, or what a key may be (else InvalidKey), on
    every face alike."""
    if text and not is_key(text):
        raise InvalidKey(f"{what} must be empty or 1-200 of A-Z a-z 0-9 . _ : -")
    return text


def encode(value: Any) -> bytes:
    """Validate a Python value and return its canonical JSON bytes (raises InvalidValue)."""
    try:
        data = orjson.dumps(value, default=_tuple_as_list)
    except (TypeError, orjson.JSONEncodeError) as error:
        _raise_first_bad(value, MAX_DEPTH, keys_seen=not str(error).startswith(_NON_STR_KEY))
        raise InvalidValue("value is not JSON") from None
    if holds_bad(data, MAX_DEPTH) or not _json_native(value):
        _raise_first_bad(value, MAX_DEPTH)
    return data


def _tuple_as_list(value: Any) -> Any:
    """orjson writes plain tuples but not named tuples (``Versioned``, ``Appended``): lists too."""
    if isinstance(value, tuple):
        return list(value)
    raise TypeError


_NON_STR_KEY = "Dict key must be str"
"""orjson's refusal of a key that is not exactly ``str``: the one refusal the text of ``json.dumps``
cannot show (it writes ``1`` as ``"1"``), so ``_locate`` hands such values to the walk."""


def _json_native(value: Any) -> bool:
    """Whether a value orjson could write holds only JSON types and finite floats.

    orjson writes NaN and Infinity as ``null`` and knows datetimes, UUIDs, enums and dataclasses;
    ``json``'s C encoder refuses all of them and accepts what JSON has (and tuples), so this one
    C-speed pass replaces a load of orjson's output and a comparison with the value."""
    try:
        json.dumps(value, allow_nan=False, check_circular=False)
    except (TypeError, ValueError):
        return False
    return True


def encode_all(values: Sequence[Any]) -> list[bytes]:
    """``encode`` of each value, checked together: one byte scan and one C-speed type check for all
    of them, which is most of ``encode``'s cost for the small values of an append. A bad value
    sends them one by one through ``encode``, which raises for the first bad one."""
    try:
        out = [orjson.dumps(value, default=_tuple_as_list) for value in values]
    except (TypeError, orjson.JSONEncodeError):
        return [encode(value) for value in values]
    joined = b"[" + b",".join(out) + b"]"  # each value one level down
    if holds_bad(joined, MAX_DEPTH + 1) or not _json_native(list(values)):
        return [encode(value) for value in values]
    return out


def encode_items(items: Sequence[Any]) -> list[bytes]:
    """Encode the items of an append, a bad one reported with its ``$[i]`` path; TooLarge when the
    items alone would pass 1 MiB as a list (the store checks the whole list atomically)."""
    if not isinstance(items, list | tuple):
        raise InvalidRequest("items must be a list")
    try:
        out = encode_all(items)
    except InvalidValue:
        for index, item in enumerate(items):
            try:
                encode(item)
            except InvalidValue as error:
                raise InvalidValue(error.message, path=f"$[{index}]{error.path[1:]}") from None
        raise
    check_size(list_size(map(len, out), len(out)), "the appended items")
    return out


def decode(data: bytes) -> Any:
    """Read bytes that keepstate stored itself (already validated on the way in)."""
    return paused(orjson.loads, data)


def parse(body: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """Parse untrusted JSON text, refusing everything ``encode`` refuses *while parsing*.

    ``max_depth`` counts from the top of ``body``: a request wrapping a value one level down
    (``{"value": ...}``, ``{"items": [...]}``) passes ``MAX_DEPTH + 1``, so the stored value may
    nest ``MAX_DEPTH`` levels as it may through the Python API."""
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    try:
        value, suspect = load_checked(raw, max_depth)
    except DeeperThan:
        return _parse_exactly(raw, max_depth)  # the value's own depth decides
    except orjson.JSONDecodeError as error:
        _parse_exactly(raw, max_depth)
        raise InvalidValue(f"body is not valid JSON: {error}") from None
    if suspect:
        value = _parse_exactly(raw, max_depth)  # orjson reads integers past 64 bits as floats: read exactly
    return value


def list_size(item_sizes: Iterable[int], count: int) -> int:
    """Bytes of a JSON array built from encoded items: brackets plus commas."""
    return 2 + sum(item_sizes) + max(count - 1, 0)


def check_size(size: int, what: str = "value") -> None:
    if size > MAX_VALUE_BYTES:
        raise TooLarge(f"{what} is {size} bytes, over the limit of {MAX_VALUE_BYTES}")


# Parsing exactly and finding the first bad place ------------------------------------------------


def _parse_exactly(raw: bytes, max_depth: int) -> Any:
    """Parse with ``json`` (integers exact, NaN and lone surrogates read) and raise at the first
    bad place with its path; return the value when there is none."""
    try:
        value = paused(json.loads, raw.decode("utf-8"), parse_constant=float)
    except RecursionError:
        raise InvalidValue(f"nesting deeper than {MAX_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as error:
        raise InvalidValue(f"body is not valid JSON: {error}") from None
    _raise_first_bad(value, max_depth)
    return value


def _raise_first_bad(value: Any, max_depth: int, keys_seen: bool = True) -> None:
    """Raise InvalidValue at the first bad place of ``value``, in the order of ``_find_bad``; return
    if all is well. ``keys_seen``: no key that is not a ``str`` comes before the first refusal
    orjson met (orjson refuses them, ``json.dumps`` writes them as strings)."""
    found = _locate(value, max_depth) if keys_seen else _LOST
    if found is _LOST:
        _find_bad(value, max_depth)
    elif found is not None:
        raise found


_LOST = InvalidValue("the text does not show this value")
"""``_locate``'s answer when the value cannot be read through its JSON text (cycles, keys of other
types): the walk decides instead."""


def _locate(value: Any, max_depth: int) -> InvalidValue | None:
    """The first bad place of ``value`` (or ``_LOST``), found through its JSON text.

    ``json.dumps`` writes the value at C speed (NaN, Infinity and non-JSON objects as ``NaN``); the
    first bad place *in document order* is the smallest of: the first string holding ``\\u0000`` or
    a lone surrogate, the first integer past 64 bits, the first ``NaN``/``Infinity`` and the first
    bracket deeper than ``max_depth``. The text up to there, closed with brackets and loaded,
    gives the position of that place in each container around it (``_ordinals``); following
    them through ``value`` gives the path. ``_find_bad`` checks all the keys of an object before
    its values, so a bad later key of an object on the way wins (``_down``)."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), check_circular=False, default=_as_nan)
    except (TypeError, ValueError, RecursionError):
        return _LOST
    parts = unescaped(text.encode("utf-8", "surrogatepass")).split(b'"')
    code = b"0".join(parts[::2]).translate(_OBJECTS_AS_ARRAYS)  # strings as 0, keys as elements
    at = min(_first_bad_string(parts), _first_bad_number(code), len(code))
    at = min(at, _first_too_deep(code[:at], max_depth))
    if at == len(code):
        return None
    return _down(value, _ordinals(code[:at]), max_depth)


def _as_nan(value: Any) -> float:
    """``json.dumps`` writes objects it does not know as ``NaN``: a bad place to find."""
    return math.nan


_OBJECTS_AS_ARRAYS = bytes.maketrans(b"{}:", b"[],")
_NUL_ESCAPE = b"\\u0000"
_SURROGATE = re.compile(rb"\xed[\xa0-\xbf]")
"""A lone surrogate written with ``surrogatepass`` (a pair was one character already)."""
_NOWHERE = 2**62


def _first(*positions: int) -> int:
    """The smallest of the positions found (``find`` says -1 for none), or ``_NOWHERE``."""
    return min((position for position in positions if position >= 0), default=_NOWHERE)


def _first_bad_string(parts: list[bytes]) -> int:
    """Where in ``code`` the first string holding ``\\u0000`` or a lone surrogate stands (its 0)."""
    strings = b'"'.join(parts[1::2])
    surrogate = _SURROGATE.search(strings)
    found = _first(strings.find(_NUL_ESCAPE), -1 if surrogate is None else surrogate.start())
    if found == _NOWHERE:
        return found
    index = strings.count(b'"', 0, found)  # which string
    return sum(map(len, parts[0 : 2 * index + 1 : 2])) + index


def _first_bad_number(code: bytes) -> int:
    """Where in ``code`` the first integer past 64 bits, ``NaN`` or ``Infinity`` starts."""
    infinity = code.find(b"I")  # only NaN and Infinity have capitals in code
    if code[infinity - 1 : infinity] == b"-":
        infinity -= 1
    return _first(first_big_int(code), code.find(b"N"), infinity)


def _first_too_deep(code: bytes, max_depth: int) -> int:
    """Where the first bracket deeper than ``max_depth`` opens in ``code`` (valid JSON cut short)."""
    if code.count(b"[") <= max_depth:
        return _NOWHERE
    if not skeleton_deeper(code.translate(None, _BUT_BRACKETS) + b"]" * _open(code), max_depth):
        return _NOWHERE
    wrap = ORJSON_DEPTH - max_depth  # the first bracket past max_depth is orjson's first past 1024
    try:
        paused(orjson.loads, b"[" * wrap + _closed(code) + b"]" * wrap)
    except orjson.JSONDecodeError as error:
        return error.pos - 1 - wrap
    return _NOWHERE


_BUT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]")))


def _open(code: bytes) -> int:
    return code.count(b"[") - code.count(b"]")


def _closed(code: bytes) -> bytes:
    """Arrays-only JSON text, complete or cut before a value or key (a 0 goes there), closed."""
    hole = b"0" if code[-1:] in (b"", b"[", b",") else b""
    return code + hole + b"]" * _open(code)


def _ordinals(code: bytes) -> list[int]:
    """For each container open where ``code`` ends, the index of the element there (objects are
    arrays of keys and values in ``code``: an even index is a key, an odd one its value)."""
    node = paused(orjson.loads, _closed(code))
    ordinals = []
    for _ in range(_open(code)):
        ordinals.append(len(node) - 1)
        node = node[-1]
    return ordinals


def _down(value: Any, ordinals: list[int], max_depth: int) -> InvalidValue:
    """Follow ``ordinals`` from the root of ``value`` to the bad place they lead to."""
    node, path = value, "$"
    for ordinal in ordinals:
        if not isinstance(node, dict):
            node, path = node[ordinal], f"{path}[{ordinal}]"
            continue
        key, child = next(islice(node.items(), ordinal // 2, None))
        if ordinal % 2 == 0:  # the key itself
            return _key_problem(key, path) or _LOST
        later = _first_bad_key(list(islice(node, ordinal // 2 + 1, None)), path)
        if later is not None:
            return later
        node, path = child, _key_path(path, key)
    return _problem_at(node, path, len(ordinals) + 1, max_depth)


def _problem_at(node: Any, path: str, depth: int, max_depth: int) -> InvalidValue:
    problem = _scalar_problem(node)
    if problem is None and isinstance(node, dict | list | tuple) and depth > max_depth:
        problem = f"nesting deeper than {MAX_DEPTH} levels"
    return _LOST if problem is None else InvalidValue(problem, path=path)


def _first_bad_key(keys: list[Any], path: str) -> InvalidValue | None:
    """The first bad one of an object's keys, found in their concatenation at C speed."""
    try:
        joined = "".join(keys)
    except TypeError:
        return next(filter(None, (_key_problem(key, path) for key in keys)), None)
    try:
        joined.encode("utf-8")
        surrogate = -1
    except UnicodeEncodeError as error:
        surrogate = error.start
    found = _first(joined.find("\x00"), surrogate)
    if found == _NOWHERE:
        return None
    return _key_problem(keys[bisect_right(list(accumulate(map(len, keys))), found)], path)


def _key_problem(key: Any, path: str) -> InvalidValue | None:
    if not isinstance(key, str):
        return InvalidValue(f"object key {key!r:.40} is not a string", path=path)
    problem = _string_problem(key)
    return None if problem is None else InvalidValue(f"object key {problem}", path=_key_path(path, key))


# The walk: the reference order, and the answer for what the text cannot show --------------------


def _find_bad(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """Walk ``value`` and raise InvalidValue at the first bad place; return if all is well.

    Python speed: used only for values ``json.dumps`` cannot write faithfully (cycles, keys that
    are not strings). Its order is the one ``_locate`` reproduces: a container is refused for its
    depth before anything in it, and all keys of an object are checked before its values."""
    stack: list[tuple[Any, str, int]] = [(value, "$", 1)]
    while stack:
        node, path, depth = stack.pop()
        problem = _scalar_problem(node)
        if problem is not None:
            raise InvalidValue(problem, path=path)
        if isinstance(node, dict | list | tuple):
            if depth > max_depth:
                raise InvalidValue(f"nesting deeper than {MAX_DEPTH} levels", path=path)
            stack.extend(reversed(list(_children(node, path, depth))))


def _children(node: Any, path: str, depth: int) -> Iterable[tuple[Any, str, int]]:
    if isinstance(node, dict):
        for key, child in node.items():
            key_problem = _key_problem(key, path)
            if key_problem is not None:
                raise key_problem
            yield child, _key_path(path, key), depth + 1
    else:
        for index, child in enumerate(node):
            yield child, f"{path}[{index}]", depth + 1


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if is_key(key) else f"{path}[{json.dumps(key, ensure_ascii=True)}]"


def _scalar_problem(node: Any) -> str | None:
    if node is None or isinstance(node, bool | dict | list | tuple):
        return None
    if isinstance(node, int):
        return None if _INT_MIN <= node <= _INT_MAX else "integer outside signed 64-bit"
    if isinstance(node, float):
        return None if math.isfinite(node) else "NaN, Infinity and numbers past the float64 range are not JSON"
    if isinstance(node, str):
        return _string_problem(node)
    return f"{type(node).__name__} is not a JSON type"


def _string_problem(text: str) -> str | None:
    if "\x00" in text:
        return "string holds U+0000"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "string holds a lone surrogate"
    return None


def metadata_data(metadata: object) -> bytes:
    """A session's metadata as stored: an object, at most 1 MiB encoded."""
    if not isinstance(metadata, dict):
        raise InvalidRequest("metadata must be an object")
    data = encode(metadata)
    check_size(len(data), "metadata")
    return data


def name_field(body: dict[str, Any], name: str, required: bool = False) -> str | None:
    """A string field in the key charset (ids, agent and user names)."""
    value = body.get(name)
    if value is None:
        if required:
            raise InvalidRequest(f"{name} is required")
        return None
    if not is_key(value):
        raise InvalidRequest(f"{name} must be a string of 1-200 of A-Z a-z 0-9 . _ : -")
    return str(value)
