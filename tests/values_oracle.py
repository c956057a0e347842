"""The value checks as they were before they ran at C speed for every shape: the oracle of
``test_values_exact.py``. Python-speed walks, kept here only to compare answers with."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

import orjson

from keepstate.errors import InvalidValue
from keepstate.values import MAX_DEPTH, is_key

_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_ALL_DIGITS_TO_9 = bytes.maketrans(b"0123456789", b"9" * 10)
_LONG_RUN = b"9" * 19
_NUL_ESCAPE = b"\\u0000"


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
