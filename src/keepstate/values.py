"""Keys and JSON values: the State API's rules, enforced once for every entry point.

Values travel and rest as canonical compact UTF-8 JSON bytes (orjson). The checks run at C speed
on the common path and fall back to a path-tracking Python walk only to find *where* a value is
bad (or to clear a false alarm), so a good 1 MiB value costs a few milliseconds, not a walk.

Refused, each with the JSON path of the first bad place: NaN and ±Infinity, numbers outside the
float64 range, integers outside signed 64-bit, U+0000 or a lone surrogate in a string or object
key, nesting deeper than ``MAX_DEPTH``, non-JSON types, and (for bodies) anything not JSON.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from .errors import InvalidKey, InvalidRequest, InvalidValue, TooLarge

MAX_VALUE_BYTES = 1024 * 1024
"""A stored value, measured as its compact UTF-8 JSON encoding."""
MAX_BODY_BYTES = 2 * 1024 * 1024
"""A request body; larger ones are refused before they are read whole."""
MAX_DEPTH = 128
"""Deepest nesting of arrays and objects accepted (the top-level value is depth 1)."""
MAX_KEY_LENGTH = 200

_KEY = re.compile(r"[A-Za-z0-9._:\-]{1,200}")
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_ALL_DIGITS_TO_9 = bytes.maketrans(b"0123456789", b"9" * 10)
_LONG_RUN = b"9" * 19
"""19 digits in a row may be an integer past 64 bits: found by mapping digits to 9 and searching
for the run, which is ~15x faster than the regular expression ``\\d{19,}`` over the same bytes."""
_NUL_ESCAPE = b"\\u0000"


def check_key(key: object, what: str = "key") -> str:
    """Return ``key`` when it is 1–200 of ``A-Z a-z 0-9 . _ : -``; else raise InvalidKey."""
    if not isinstance(key, str) or _KEY.fullmatch(key) is None:
        raise InvalidKey(f"{what} must be 1-200 of A-Z a-z 0-9 . _ : -, got {key!r:.80}")
    return key


def is_key(key: object) -> bool:
    return isinstance(key, str) and _KEY.fullmatch(key) is not None


def encode(value: Any) -> bytes:
    """Validate a Python value and return its canonical JSON bytes (raises InvalidValue)."""
    try:
        data = orjson.dumps(value, default=_tuple_as_list)
    except (TypeError, orjson.JSONEncodeError):
        _find_bad(value)
        raise InvalidValue("value is not JSON") from None
    if _suspicious(data) or orjson.loads(data) != value:
        _find_bad(value)  # raises for a real problem; returns for a false alarm
    return data


def _tuple_as_list(value: Any) -> Any:
    """orjson writes plain tuples but not named tuples (``Versioned``, ``Appended``): lists too."""
    if isinstance(value, tuple):
        return list(value)
    raise TypeError


def encode_all(values: Sequence[Any]) -> list[bytes]:
    """``encode`` of each value, checked together: one byte scan and one round trip for all of them,
    which is most of ``encode``'s cost for the small values of an append. Any doubt (or a bad
    value) sends them one by one through ``encode``, which raises for the first bad one."""
    try:
        out = [orjson.dumps(value, default=_tuple_as_list) for value in values]
    except (TypeError, orjson.JSONEncodeError):
        return [encode(value) for value in values]
    joined = b"[" + b",".join(out) + b"]"
    if (
        _bad_bytes(joined)
        or (_nesting_bound(joined) > MAX_DEPTH + 1  # only then look at each
            and any(_nesting_bound(data) > MAX_DEPTH for data in out))
        or orjson.loads(joined) != list(values)
    ):
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
    return orjson.loads(data)


def parse(body: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """Parse untrusted JSON text, refusing everything ``encode`` refuses *while parsing*.

    ``max_depth`` counts from the top of ``body``: a request wrapping a value one level down
    (``{"value": ...}``, ``{"items": [...]}``) passes ``MAX_DEPTH + 1``, so the stored value may
    nest ``MAX_DEPTH`` levels as it may through the Python API."""
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        _parse_slow(raw, max_depth)
        raise InvalidValue(f"body is not valid JSON: {error}") from None
    if _suspicious(raw, max_depth):
        value = _parse_slow(raw, max_depth)  # orjson reads integers past 64 bits as floats: read exactly
    return value


def list_size(item_sizes: Iterable[int], count: int) -> int:
    """Bytes of a JSON array built from encoded items: brackets plus commas."""
    return 2 + sum(item_sizes) + max(count - 1, 0)


def check_size(size: int, what: str = "value") -> None:
    if size > MAX_VALUE_BYTES:
        raise TooLarge(f"{what} is {size} bytes, over the limit of {MAX_VALUE_BYTES}")


def _suspicious(data: bytes, max_depth: int = MAX_DEPTH) -> bool:
    """Cheap byte scans that clear almost every good value without a Python walk."""
    return _bad_bytes(data) or _nesting_bound(data) > max_depth


def _bad_bytes(data: bytes) -> bool:
    """An escaped NUL, or a run of digits that may be an integer past 64 bits."""
    return _NUL_ESCAPE in data or _has_long_digits(data)


def _nesting_bound(data: bytes) -> int:
    """An upper bound of the JSON's nesting depth: every array and object opened."""
    return data.count(b"[") + data.count(b"{")


def _has_long_digits(data: bytes) -> bool:
    return _LONG_RUN in data.translate(_ALL_DIGITS_TO_9)


class _Bad:
    """Marks a literal the slow parser met that must be refused (NaN, 1e400, 2**63)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _bad_int(text: str) -> int | _Bad:
    number = int(text)
    return number if _INT_MIN <= number <= _INT_MAX else _Bad(text)


def _bad_float(text: str) -> float | _Bad:
    number = float(text)
    return number if math.isfinite(number) else _Bad(text)


def _parse_slow(raw: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """Parse exactly, marking bad literals, and raise at the first bad place with its path."""
    try:
        text = raw.decode("utf-8")
        value = json.loads(text, parse_int=_bad_int, parse_float=_bad_float, parse_constant=_Bad)
    except RecursionError:
        raise InvalidValue(f"nesting deeper than {MAX_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as error:
        raise InvalidValue(f"body is not valid JSON: {error}") from None
    _find_bad(value, max_depth)
    return value


def _find_bad(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """Walk ``value`` and raise InvalidValue at the first bad place; return if all is well."""
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
            if not isinstance(key, str):
                raise InvalidValue(f"object key {key!r:.40} is not a string", path=path)
            key_path = f"{path}.{key}" if is_key(key) else f"{path}[{_quote(key)}]"
            key_problem = _string_problem(key)
            if key_problem is not None:
                raise InvalidValue(f"object key {key_problem}", path=key_path)
            yield child, key_path, depth + 1
    else:
        for index, child in enumerate(node):
            yield child, f"{path}[{index}]", depth + 1


def _scalar_problem(node: Any) -> str | None:
    if node is None or isinstance(node, bool | dict | list | tuple):
        return None
    if isinstance(node, _Bad):
        return f"{node.text} is not a finite float64 or signed 64-bit integer"
    if isinstance(node, int):
        return None if _INT_MIN <= node <= _INT_MAX else "integer outside signed 64-bit"
    if isinstance(node, float):
        return None if math.isfinite(node) else "NaN and Infinity are not JSON"
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


def _quote(key: str) -> str:
    return json.dumps(key, ensure_ascii=True)
